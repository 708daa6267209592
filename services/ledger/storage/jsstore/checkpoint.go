package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// ErrInconsistent: the tree does not extend the log's previous checkpoint.
// The ledger refuses to sign (C2SP: a log MUST NOT sign a checkpoint
// inconsistent with one it signed before); it means the stream was altered
// under the broker, and needs an operator.
var ErrInconsistent = errors.New("ledger: log disagrees with its previous checkpoint; not signing")

// storedCheckpoint is the value kept per log in the checkpoints bucket.
type storedCheckpoint struct {
	Size uint64 `json:"size"`
	Root []byte `json:"root"`
	Note []byte `json:"note"`
}

// Run saves tree snapshots and signs checkpoints until ctx is done, then
// does a last round. Done is closed when it has returned.
func (s *Store) Run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.opts.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			s.Flush(fctx)
			cancel()
			return
		case <-t.C:
		case <-s.kick:
		}
		s.Flush(ctx)
	}
}

// Flush saves the snapshot of every log appended to since the last round
// and signs its checkpoint. Failures are logged and retried next round.
func (s *Store) Flush(ctx context.Context) {
	s.mu.Lock()
	logs := make([]*logState, 0, len(s.touched))
	for ls := range s.touched {
		logs = append(logs, ls)
		ls.refs++ // pinned while saved
	}
	clear(s.touched)
	s.appends = 0
	s.mu.Unlock()
	for _, ls := range logs {
		if _, _, err := s.persist(ctx, ls); err != nil {
			s.m.cpFailures.Inc()
			s.log.Warn("ledger checkpoint round failed for a log; retrying next round", "log", ls.subject, "err", err)
			s.mu.Lock()
			s.touched[ls] = true
			s.mu.Unlock()
		}
		s.release(ls)
	}
}

// persist writes ls's snapshot and signs its checkpoint; it returns the
// latest checkpoint of the log (which may be another replica's, larger).
func (s *Store) persist(ctx context.Context, ls *logState) (*storedCheckpoint, uint64, error) {
	ls.flushMu.Lock()
	defer ls.flushMu.Unlock()
	ls.mu.Lock()
	if !ls.loaded {
		ls.mu.Unlock()
		return nil, 0, nil
	}
	get := kvGet(s.trees)
	writes, err := ls.tree.snapshotWrites(ctx, get)
	size := uint64(ls.tree.size)
	var root tlog.Hash
	if err == nil && size > 0 {
		root, err = ls.tree.root(ctx, get, int64(size))
	}
	ls.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	for i, w := range writes {
		if _, err := s.trees.Put(ctx, w.key, w.value); err != nil {
			s.m.snapshotFails.Inc()
			ls.mu.Lock()
			ls.tree.markDirty(writes[i:])
			ls.mu.Unlock()
			return nil, 0, fmt.Errorf("save tree %s: %w", w.key, err)
		}
	}
	if len(writes) > 0 {
		s.m.snapshots.Inc()
	}
	if size == 0 {
		return nil, 0, nil
	}
	cp, err := s.signCheckpoint(ctx, ls, size, root)
	return cp, size, err
}

// checkpoint reads the log's stored checkpoint; nil and revision 0 when
// there is none.
func (s *Store) checkpoint(ctx context.Context, key string) (*storedCheckpoint, uint64, error) {
	e, err := s.cps.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read checkpoint %s: %w", key, err)
	}
	var c storedCheckpoint
	if err := json.Unmarshal(e.Value(), &c); err != nil || len(c.Root) != tlog.HashSize {
		return nil, 0, fmt.Errorf("stored checkpoint %s is malformed", key)
	}
	return &c, e.Revision(), nil
}

// signCheckpoint signs (size, root) for ls unless the log already has a
// checkpoint at least as large, and never one that disagrees with it.
func (s *Store) signCheckpoint(ctx context.Context, ls *logState, size uint64, root tlog.Hash) (*storedCheckpoint, error) {
	for range 8 {
		prev, rev, err := s.checkpoint(ctx, ls.key)
		if err != nil {
			return nil, err
		}
		if prev != nil && prev.Size >= size {
			return prev, nil
		}
		if prev != nil {
			ls.mu.Lock()
			var old tlog.Hash
			if ls.loaded && int64(prev.Size) <= ls.tree.size {
				old, err = ls.tree.root(ctx, kvGet(s.trees), int64(prev.Size))
			} else {
				err = fmt.Errorf("tree of %d leaves is behind the checkpoint of %d", ls.tree.size, prev.Size)
			}
			ls.mu.Unlock()
			if err != nil {
				return nil, err
			}
			if old != tlog.Hash(prev.Root) {
				s.m.cpRefused.Inc()
				s.log.Error("ledger log disagrees with its previous checkpoint; refusing to sign", "log", ls.subject,
					"previous_size", prev.Size, "size", size)
				return nil, fmt.Errorf("%w: %s at %d", ErrInconsistent, ls.subject, prev.Size)
			}
		}
		signed, err := s.sign(ctx, ls.tenant, ledgerlog.Checkpoint{Origin: Origin(ls.tenant, ls.person), Size: size, Root: root})
		if err != nil {
			return nil, err
		}
		c := &storedCheckpoint{Size: size, Root: root[:], Note: signed}
		val, _ := json.Marshal(c)
		if prev == nil {
			_, err = s.cps.Create(ctx, ls.key, val)
		} else {
			_, err = s.cps.Update(ctx, ls.key, val, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || bus.IsWrongLastSequence(err) {
			continue // another replica signed in between: look again
		}
		if err != nil {
			return nil, fmt.Errorf("store checkpoint of %s: %w", ls.subject, err)
		}
		s.m.checkpoints.Inc()
		return c, nil
	}
	return nil, fmt.Errorf("checkpoint of %s kept changing", ls.subject)
}

// sign signs a checkpoint with the tenant's active LEDGER key; a key that
// was rotated or revoked meanwhile is replaced once.
func (s *Store) sign(ctx context.Context, tenant string, c ledgerlog.Checkpoint) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		signer, err := s.signer(ctx, tenant, attempt > 0)
		if err != nil {
			return nil, err
		}
		signed, err := ledgerlog.SignCheckpoint(c, signer)
		if err == nil {
			return signed, nil
		}
		if attempt > 0 || !(errors.Is(err, keystore.ErrKeyNotUsable) || errors.Is(err, keystore.ErrKeyRevoked) || errors.Is(err, keystore.ErrNotFound)) {
			return nil, err
		}
	}
}

func (s *Store) signer(ctx context.Context, tenant string, refresh bool) (note.Signer, error) {
	s.signerMu.Lock()
	defer s.signerMu.Unlock()
	if sg, ok := s.signers[tenant]; ok && !refresh {
		return sg, nil
	}
	k, err := s.ks.Active(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		return nil, fmt.Errorf("ledger key of %s: %w", tenant, err)
	}
	cs, err := s.ks.Signer(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, k.KeyID)
	if err != nil {
		return nil, fmt.Errorf("ledger key %s of %s: %w", k.KeyID, tenant, err)
	}
	ns, err := ledgerlog.NoteSigner(tenant, cs)
	if err != nil {
		return nil, err
	}
	s.signers[tenant] = ns
	return ns, nil
}

// CheckpointNow makes sure a signed checkpoint covers every leaf the log
// has now (a receipt needs one at once, not at the next round) and returns
// that checkpoint and its size. It signs without saving the tree's
// snapshot first: the log was appended to, so the next round saves it, and
// a snapshot behind the checkpoint is only replayed further on load (the
// stream, not the snapshot, is what a checkpoint is checked against).
// That keeps a receipt at a key-value read, a signature and a
// compare-and-set.
func (s *Store) CheckpointNow(ctx context.Context, tenant, person string) ([]byte, uint64, error) {
	ls, err := s.acquire(tenant, person)
	if err != nil {
		return nil, 0, err
	}
	defer s.release(ls)
	ls.mu.Lock()
	err = s.ensureLoaded(ctx, ls)
	if err == nil {
		err = s.syncTail(ctx, ls)
	}
	size := uint64(ls.tree.size)
	var root tlog.Hash
	if err == nil && size > 0 {
		root, err = ls.tree.root(ctx, kvGet(s.trees), int64(size))
	}
	ls.mu.Unlock()
	if err != nil {
		return nil, 0, err
	}
	if size == 0 {
		return nil, 0, fmt.Errorf("%w: %s/%s", storage.ErrNoLog, tenant, person)
	}
	cp, err := s.signCheckpoint(ctx, ls, size, root)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: checkpoint of %s: %w", ls.subject, err)
	}
	return cp.Note, cp.Size, nil
}
