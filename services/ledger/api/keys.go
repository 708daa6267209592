package api

import (
	"fmt"

	"golang.org/x/mod/sumdb/note"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// verifiers splits the tenant's ledger keys into those whose signatures
// count (active and retired: a retired key still vouches for what it
// signed) and those revoked as compromised. Either is nil when empty.
func verifiers(keys []storage.PublicKey) (good, revoked note.Verifiers, err error) {
	var g, r []note.Verifier
	for _, k := range keys {
		v, err := note.NewVerifier(k.VerifierKey)
		if err != nil {
			return nil, nil, fmt.Errorf("ledger key %s: %w", k.KeyID, err)
		}
		if k.State == alpv1.KeyState_KEY_STATE_REVOKED {
			r = append(r, v)
		} else {
			g = append(g, v)
		}
	}
	if len(g) > 0 {
		good = note.VerifierList(g...)
	} else {
		good = note.VerifierList()
	}
	if len(r) > 0 {
		revoked = note.VerifierList(r...)
	}
	return good, revoked, nil
}

// exportKeys are the keys an export lists. Keys revoked as compromised are
// left out: an export's keys are trusted without dates, so a revoked key in
// it would vouch for whatever was forged with it after it leaked.
func exportKeys(tenant string, keys []storage.PublicKey) ([]ledgerlog.ExportKey, error) {
	var out []ledgerlog.ExportKey
	for _, k := range keys {
		if k.State == alpv1.KeyState_KEY_STATE_REVOKED {
			continue
		}
		ek, err := ledgerlog.NewExportKey(tenant, k.PublicKey)
		if err != nil {
			return nil, fmt.Errorf("ledger key %s: %w", k.KeyID, err)
		}
		if ek.Verifier != k.VerifierKey {
			return nil, fmt.Errorf("ledger key %s: stored verifier key %q is not the public key's", k.KeyID, k.VerifierKey)
		}
		out = append(out, ek)
	}
	if len(out) == 0 {
		return nil, errNoKeys
	}
	return out, nil
}
