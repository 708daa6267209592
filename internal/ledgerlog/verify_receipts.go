package ledgerlog

import (
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"
)

// VerifyOption adds information to Verify.
type VerifyOption func(*verifyConfig)

type verifyConfig struct {
	counterparty []note.Verifier
	// names are the key names some counterparty key was given for: a
	// receipt of such a name under an unknown key id is invalid, not merely
	// unverified.
	names map[string]bool
	// cosigners are cosigner keys (CosignerKey form), given or derived
	// from the counterparty keys.
	cosigners []string
	keyError  error
}

// WithCounterpartyKeys supplies signed-note verifier keys (VerifierKey) of
// counterparties, so that the receipts they issued can be verified.
// Receipts from tenants without a key here are reported as unverified, not
// as failures; a receipt claiming a tenant whose keys were given, under a
// key not among them, is invalid. A malformed key is a problem of the
// verification.
func WithCounterpartyKeys(vkeys ...string) VerifyOption {
	return func(c *verifyConfig) {
		for _, k := range vkeys {
			v, err := note.NewVerifier(k)
			if err != nil {
				c.keyError = fmt.Errorf("counterparty key %s: %w", quote(k), err)
				continue
			}
			c.counterparty = append(c.counterparty, v)
			// The tenant's witness key is its ledger key (CosignerKeyOf).
			if ck, err := CosignerKeyOf(k); err == nil {
				c.cosigners = append(c.cosigners, ck)
			}
			if c.names == nil {
				c.names = map[string]bool{}
			}
			c.names[v.Name()] = true
		}
	}
}

// WithCounterpartyExport supplies the keys listed in a counterparty's
// export (as WithCounterpartyKeys).
func WithCounterpartyExport(x *Export) VerifyOption {
	vkeys := make([]string, 0, len(x.Keys))
	for _, k := range x.Keys {
		vkeys = append(vkeys, k.Verifier)
	}
	return WithCounterpartyKeys(vkeys...)
}

// checkReceipts verifies embedded receipts. A received receipt needs its
// issuer's keys; an issued one is checked with the export's own keys and
// against the export's own leaf.
func (v *verified) checkReceipts(cfg verifyConfig) []Problem {
	var ps []Problem
	others := note.VerifierList(cfg.counterparty...)
	for i, info := range v.entries {
		if info.receipt == nil {
			continue
		}
		rc := info.receipt
		check := ReceiptCheck{Index: uint64(i), EnvelopeID: info.envelopeID, Kind: info.kind, Issuer: rc.Log}
		bad := func(format string, args ...any) {
			check.Status = ReceiptInvalid
			ps = append(ps, Problem{Index: int64(i), EnvelopeID: info.envelopeID, Msg: fmt.Sprintf(format, args...)})
		}
		switch info.kind {
		case KindReceiptReceived:
			if rc.Log == v.x.Log {
				bad("a received receipt issued by this same log")
				break
			}
			// A receipt from another log of the same tenant (a same-broker
			// delivery) is signed with the tenant's key, which the export
			// lists: it needs no counterparty's.
			verifiers := note.Verifiers(others)
			if tenantOf(rc.Log) == tenantOf(v.x.Log) && v.keys != nil {
				verifiers = v.keys
			}
			_, err := VerifyReceipt(rc, verifiers)
			var nokey *NoKeyError
			switch {
			case errors.As(err, &nokey) && cfg.names[KeyName(tenantOf(rc.Log))]:
				bad("receipt from %s is signed by key %s+%s, which is not among the keys given for %s", rc.Log, KeyName(tenantOf(rc.Log)), rc.KeyID, tenantOf(rc.Log))
			case errors.As(err, &nokey):
				check.Status = nokey.Error()
			case err != nil:
				bad("receipt from %s: %v", rc.Log, trimPrefix(err))
			default:
				check.Status = ReceiptVerified
			}
		case KindReceiptIssued:
			if rc.Log != v.x.Log {
				bad("an issued receipt of another log, %s", rc.Log)
				break
			}
			if err := v.checkOwnReceipt(rc); err != nil {
				bad("issued receipt: %v", err)
			} else {
				check.Status = ReceiptVerified
			}
		}
		v.report.Receipts = append(v.report.Receipts, check)
	}
	return ps
}

// checkOwnReceipt checks a receipt this ledger issued against the ledger
// itself: signature, its leaf, and that its checkpoint is a prefix of the
// export's.
func (v *verified) checkOwnReceipt(rc *Receipt) error {
	if v.keys == nil {
		return fmt.Errorf("no valid keys in the export")
	}
	cp, err := VerifyReceipt(rc, v.keys)
	if err != nil {
		return trimPrefix(err)
	}
	if rc.Index >= uint64(len(v.x.Entries)) {
		return fmt.Errorf("it names entry %d, beyond the export", rc.Index)
	}
	if err := CheckReceiptLeaf(rc, v.x.Entries[rc.Index].Leaf); err != nil {
		return trimPrefix(err)
	}
	return v.prefixOf(cp)
}

// prefixOf checks that cp (a checkpoint of this log found elsewhere, e.g.
// in a receipt) describes a prefix of this export's verified tree.
func (v *verified) prefixOf(cp Checkpoint) error {
	r := v.report
	if v.tree == nil || !r.CheckpointOK {
		return fmt.Errorf("the ledger's own tree does not verify, so its checkpoint %s cannot be compared", cp)
	}
	if cp.Size > r.Checkpoint.Size {
		if cp.Size > v.tree.Size() {
			return fmt.Errorf("the export (checkpoint size %d) is older than checkpoint %s, which the log signed: it withholds entries", r.Checkpoint.Size, cp)
		}
		root, err := v.tree.Root(cp.Size)
		if err != nil || root != cp.Root {
			return fmt.Errorf("checkpoint %s is not a prefix of the exported log", cp)
		}
		return nil
	}
	proof, err := ProveConsistency(v.tree, cp.Size, r.Checkpoint.Size)
	if err == nil {
		err = VerifyConsistency(proof, cp, r.Checkpoint)
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s is inconsistent with the export's checkpoint %s: the log was rewritten after it was signed", cp, r.Checkpoint)
	}
	return nil
}

// trimPrefix drops this package's "ledgerlog: " prefix inside a report.
func trimPrefix(err error) error {
	const p = "ledgerlog: "
	if s := err.Error(); len(s) > len(p) && s[:len(p)] == p {
		return errors.New(s[len(p):])
	}
	return err
}

// tenantOf is the tenant of a valid origin.
func tenantOf(origin string) string {
	t, _, _ := ParseOrigin(origin)
	return t
}
