package jsstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/alpd-project/alpd/internal/bus"
)

// A tenant acting as a witness (C2SP tlog-witness) remembers, per origin
// of another log, the last checkpoint it cosigned, and cosigns only
// checkpoints consistent with it. The state sits in the checkpoints bucket
// beside the logs' own checkpoints (they are the same kind of record: the
// checkpoint a signer is bound to), under
// witness.<tenant token>.<SHA-256 of the origin, hex>, which no log's key
// ("<tenant token>.<person>") can be.

// ErrWitnessConflict: another cosigning of the origin changed the state
// between read and write; read it again.
var ErrWitnessConflict = errors.New("ledger: the witness state changed meanwhile")

// Witnessed is the last checkpoint of an origin a witness cosigned; zero
// before the first.
type Witnessed struct {
	Size uint64    `json:"size"`
	Root tlog.Hash `json:"root"`
	// Revision is the bucket revision it was read at (0: none stored).
	Revision uint64 `json:"-"`
}

func witnessKey(witness, origin string) string {
	sum := sha256.Sum256([]byte(origin))
	return "witness." + bus.TenantToken(witness) + "." + hex.EncodeToString(sum[:])
}

// Witnessed reads what witness (a hosted tenant) cosigned last of origin.
func (s *Store) Witnessed(ctx context.Context, witness, origin string) (Witnessed, error) {
	if err := s.checkTenant(witness); err != nil {
		return Witnessed{}, err
	}
	e, err := s.cps.Get(ctx, witnessKey(witness, origin))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Witnessed{}, nil
	}
	if err != nil {
		return Witnessed{}, fmt.Errorf("ledger: witness state of %s for %s: %w", witness, origin, err)
	}
	var w Witnessed
	if err := json.Unmarshal(e.Value(), &w); err != nil {
		return Witnessed{}, fmt.Errorf("ledger: witness state of %s for %s is malformed: %w", witness, origin, err)
	}
	w.Revision = e.Revision()
	return w, nil
}

// SetWitnessed replaces the state read as prev with next (compare-and-set
// on prev's revision): ErrWitnessConflict if it changed meanwhile.
func (s *Store) SetWitnessed(ctx context.Context, witness, origin string, prev, next Witnessed) error {
	val, err := json.Marshal(next)
	if err != nil {
		return err
	}
	key := witnessKey(witness, origin)
	if prev.Revision == 0 {
		_, err = s.cps.Create(ctx, key, val)
	} else {
		_, err = s.cps.Update(ctx, key, val, prev.Revision)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || bus.IsWrongLastSequence(err) {
		return ErrWitnessConflict
	}
	if err != nil {
		return fmt.Errorf("ledger: witness state of %s for %s: %w", witness, origin, err)
	}
	return nil
}
