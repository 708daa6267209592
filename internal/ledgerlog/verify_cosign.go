package ledgerlog

import (
	"errors"
	"fmt"
)

// CosignatureCheck is the outcome of checking one checkpoint.cosigned entry.
type CosignatureCheck struct {
	Index uint64
	// Cosigner is the cosigner's key name, Size the cosigned checkpoint's.
	Cosigner string
	Size     uint64
	// Time is the cosignature's timestamp, seconds since the epoch.
	Time uint64
	// Status is "verified", "unverified: no key for <name>" or "invalid".
	Status string
}

// WithCosignerKeys supplies cosigner verifier keys (CosignerKey form) so
// that the cosignatures a ledger recorded can be verified. A tenant's
// ledger keys given with WithCounterpartyKeys stand for its cosigner keys
// too. A cosignature by a cosigner without a key is reported unverified,
// not as a failure.
func WithCosignerKeys(vkeys ...string) VerifyOption {
	return func(c *verifyConfig) {
		for _, k := range vkeys {
			if _, _, err := parseVKey(k, algCosignatureV1); err != nil {
				c.keyError = fmt.Errorf("cosigner key: %w", trimPrefix(err))
				continue
			}
			c.cosigners = append(c.cosigners, k)
		}
	}
}

// checkCosignatures checks every checkpoint.cosigned entry: the checkpoint
// is one this log signed (the export's keys) and a prefix of the export's
// checkpoint, and the cosignature verifies with its cosigner's key when
// one was supplied.
func (v *verified) checkCosignatures(cfg verifyConfig) []Problem {
	var ps []Problem
	for i, info := range v.entries {
		if info.kind != KindCheckpointCosigned || !info.ok {
			continue
		}
		check := CosignatureCheck{Index: uint64(i)}
		bad := func(format string, args ...any) {
			check.Status = ReceiptInvalid
			ps = append(ps, Problem{Index: int64(i), Msg: fmt.Sprintf(format, args...)})
		}
		cs, _ := ParseCosignature(info.cosignature)
		check.Cosigner, check.Time = cs.Name, cs.Time
		func() {
			if v.keys == nil {
				bad("cosigned checkpoint: no valid keys in the export")
				return
			}
			cp, err := OpenCheckpoint([]byte(info.checkpoint), v.x.Log, v.keys)
			if err != nil {
				bad("cosigned checkpoint: %v", trimPrefix(err))
				return
			}
			check.Size = cp.Size
			if err := v.prefixOf(cp); err != nil {
				bad("cosigned checkpoint: %v", err)
				return
			}
			_, err = VerifyCosignature(info.cosignature, cp, cfg.cosigners...)
			var nokey *NoKeyError
			switch {
			case errors.As(err, &nokey):
				check.Status = nokey.Error()
			case err != nil:
				bad("cosignature: %v", trimPrefix(err))
			default:
				check.Status = ReceiptVerified
			}
		}()
		v.report.Cosignatures = append(v.report.Cosignatures, check)
	}
	return ps
}
