package jsstore

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/services/ledger/secrets"
	"github.com/alpd-project/alpd/services/ledger/storage"
)

// withLog runs fn on ls's tree, loaded and caught up with the stream, under
// the log's lock. A stale snapshot met while reading tiles makes the tree
// be rebuilt from the stream, and fn run once more.
func (s *Store) withLog(ctx context.Context, tenant, person string, fn func(ls *logState) error) error {
	ls, err := s.acquire(tenant, person)
	if err != nil {
		return err
	}
	defer s.release(ls)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for attempt := 0; ; attempt++ {
		err := s.ensureLoaded(ctx, ls)
		if err == nil {
			err = s.syncTail(ctx, ls)
		}
		if err == nil {
			err = fn(ls)
		}
		if errors.Is(err, errStale) && attempt == 0 {
			ls.loaded, ls.rebuild = false, true
			continue
		}
		return err
	}
}

// Head implements storage.Reader.
func (s *Store) Head(ctx context.Context, tenant, person string) (storage.Head, error) {
	var h storage.Head
	err := s.withLog(ctx, tenant, person, func(ls *logState) error {
		if ls.tree.size == 0 {
			return fmt.Errorf("%w: %s/%s", storage.ErrNoLog, tenant, person)
		}
		root, err := ls.tree.root(ctx, kvGet(s.trees), ls.tree.size)
		h = storage.Head{Origin: Origin(tenant, person), Size: uint64(ls.tree.size), Root: root}
		return err
	})
	if err != nil {
		return storage.Head{}, err
	}
	cp, _, err := s.checkpoint(ctx, bus.TenantToken(tenant)+"."+person)
	if err != nil {
		return storage.Head{}, fmt.Errorf("ledger: head of %s/%s: %w", tenant, person, err)
	}
	if cp != nil && cp.Size <= h.Size {
		h.SignedCheckpoint, h.CheckpointSize = cp.Note, cp.Size
	}
	return h, nil
}

// Entries implements storage.Reader.
func (s *Store) Entries(ctx context.Context, tenant, person string, from uint64, limit int) ([]storage.StoredEntry, error) {
	return s.entries(ctx, tenant, person, from, limit, true)
}

// entries reads up to limit leaves from index from, with their openings
// if withOpenings (decrypting them costs a secret and an AES open each).
func (s *Store) entries(ctx context.Context, tenant, person string, from uint64, limit int, withOpenings bool) ([]storage.StoredEntry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d", storage.ErrInvalid, limit)
	}
	var (
		seq, size uint64
		subject   string
	)
	err := s.withLog(ctx, tenant, person, func(ls *logState) error {
		size, subject = uint64(ls.tree.size), ls.subject
		if size == 0 {
			return fmt.Errorf("%w: %s/%s", storage.ErrNoLog, tenant, person)
		}
		if from >= size {
			return nil
		}
		var err error
		seq, err = ls.tree.seqOf(ctx, kvGet(s.trees), int64(from))
		return err
	})
	if err != nil || from >= size {
		return nil, err
	}
	n := int(min(uint64(limit), size-from))
	out := make([]storage.StoredEntry, 0, n)
	var derr error
	err = s.readFrom(ctx, subject, seq, 0, func(m *jetstream.RawStreamMsg) bool {
		lm, err := decodeLeaf(m)
		if err != nil {
			derr = err
			return false
		}
		out = append(out, storage.StoredEntry{Index: from + uint64(len(out)), Leaf: lm.leaf, Time: lm.time})
		if withOpenings {
			out[len(out)-1].Opening, out[len(out)-1].Erased = s.opening(ctx, tenant, person, from+uint64(len(out)-1), lm)
		}
		return len(out) < n
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// opening decrypts a leaf's opening with the person's ledger secret.
func (s *Store) opening(ctx context.Context, tenant, person string, index uint64, lm *leafMsg) (*storage.Opening, bool) {
	if len(lm.opening) == 0 || s.secrets == nil {
		return nil, false
	}
	sec, err := s.secrets.Get(ctx, tenant, person, false)
	if errors.Is(err, secrets.ErrErased) {
		return nil, true
	}
	if err != nil {
		s.log.Warn("ledger secret unavailable; entry returned without its opening", "tenant", tenant, "index", index, "err", err)
		return nil, false
	}
	e, err := ledgerlog.ParseEntry(lm.leaf)
	if err != nil {
		return nil, false
	}
	digest, err := sec.OpenOpening(e.EnvelopeID, index, lm.opening)
	if err != nil {
		s.log.Warn("ledger opening does not open", "tenant", tenant, "index", index, "err", err)
		return nil, false
	}
	return &storage.Opening{Salt: sec.Salt(e.EnvelopeID, index), Digest: digest}, false
}

// hashReader reads ls's stored hashes, catching the tree up with the
// stream when asked for hashes beyond it.
type hashReader struct {
	s   *Store
	ls  *logState
	ctx context.Context
}

func (r *hashReader) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	r.ls.mu.Lock()
	defer r.ls.mu.Unlock()
	if err := r.s.ensureLoaded(r.ctx, r.ls); err != nil {
		return nil, err
	}
	for _, x := range indexes {
		if x >= r.ls.tree.hashCount() {
			if err := r.s.syncTail(r.ctx, r.ls); err != nil {
				return nil, err
			}
			break
		}
	}
	return r.ls.tree.reader(r.ctx, kvGet(r.s.trees)).ReadHashes(indexes)
}

// HashReader implements storage.Reader.
func (s *Store) HashReader(ctx context.Context, tenant, person string) (tlog.HashReader, error) {
	if err := s.check(tenant, person); err != nil {
		return nil, err
	}
	ls, err := s.acquire(tenant, person)
	if err != nil {
		return nil, err
	}
	defer s.release(ls)
	return &hashReader{s: s, ls: ls, ctx: ctx}, nil
}

func (s *Store) proveIn(ctx context.Context, tenant, person string, need uint64, prove func(tlog.HashReader) error) error {
	return s.withLog(ctx, tenant, person, func(ls *logState) error {
		if need > uint64(ls.tree.size) {
			return fmt.Errorf("%w: tree size %d beyond the log's %d leaves", storage.ErrInvalid, need, ls.tree.size)
		}
		return prove(ls.tree.reader(ctx, kvGet(s.trees)))
	})
}

// InclusionProof implements storage.Reader.
func (s *Store) InclusionProof(ctx context.Context, tenant, person string, index, treeSize uint64) (tlog.RecordProof, error) {
	if index >= treeSize {
		return nil, fmt.Errorf("%w: leaf %d in a tree of %d", storage.ErrInvalid, index, treeSize)
	}
	var p tlog.RecordProof
	err := s.proveIn(ctx, tenant, person, treeSize, func(r tlog.HashReader) (err error) {
		p, err = ledgerlog.ProveInclusion(r, index, treeSize)
		return err
	})
	return p, err
}

// ConsistencyProof implements storage.Reader.
func (s *Store) ConsistencyProof(ctx context.Context, tenant, person string, oldSize, newSize uint64) (tlog.TreeProof, error) {
	if oldSize == 0 || oldSize > newSize {
		return nil, fmt.Errorf("%w: consistency from %d to %d leaves", storage.ErrInvalid, oldSize, newSize)
	}
	var p tlog.TreeProof
	err := s.proveIn(ctx, tenant, person, newSize, func(r tlog.HashReader) (err error) {
		p, err = ledgerlog.ProveConsistency(r, oldSize, newSize)
		return err
	})
	return p, err
}

// PublicKeys implements storage.Reader.
func (s *Store) PublicKeys(ctx context.Context, tenant string) ([]storage.PublicKey, error) {
	if err := s.checkTenant(tenant); err != nil {
		return nil, err
	}
	keys, err := s.ks.Keys(ctx, tenant, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER)
	if err != nil {
		return nil, fmt.Errorf("ledger: keys of %s: %w", tenant, err)
	}
	out := make([]storage.PublicKey, 0, len(keys))
	for _, k := range keys {
		vkey, err := ledgerlog.VerifierKey(tenant, k.PublicKey)
		if err != nil {
			return nil, err
		}
		out = append(out, storage.PublicKey{KeyID: k.KeyID, Name: ledgerlog.KeyName(tenant), VerifierKey: vkey,
			PublicKey: ed25519.PublicKey(k.PublicKey), State: k.State, Created: k.Created, CompromisedAt: k.CompromisedAt})
	}
	return out, nil
}

// Leaf returns leaf index of a person's log.
func (s *Store) Leaf(ctx context.Context, tenant, person string, index uint64) ([]byte, error) {
	es, err := s.Entries(ctx, tenant, person, index, 1)
	if err != nil {
		return nil, err
	}
	if len(es) == 0 {
		return nil, fmt.Errorf("%w: no leaf %d", storage.ErrInvalid, index)
	}
	return es[0].Leaf, nil
}

// FindEnvelope returns the last leaf of a person's log about envelopeID
// whose entry satisfies match, searching from the end backwards (the
// envelope a receipt is asked for is usually recent) in growing chunks,
// and no further back than the leaves stored before notBefore (stream
// time; zero: the whole log). ErrInvalid when there is none.
func (s *Store) FindEnvelope(ctx context.Context, tenant, person, envelopeID string, notBefore time.Time, match func(ledgerlog.Entry) bool) (uint64, []byte, error) {
	var size uint64
	if err := s.withLog(ctx, tenant, person, func(ls *logState) error {
		size = uint64(ls.tree.size)
		return nil
	}); err != nil {
		return 0, nil, err
	}
	if size == 0 {
		return 0, nil, fmt.Errorf("%w: %s/%s", storage.ErrNoLog, tenant, person)
	}
	chunk := uint64(16)
	for end := size; end > 0; chunk = min(4*chunk, 512) {
		start := end - min(end, chunk)
		es, err := s.entries(ctx, tenant, person, start, int(end-start), false)
		if err != nil {
			return 0, nil, err
		}
		for i := len(es) - 1; i >= 0; i-- {
			e, err := ledgerlog.ParseEntry(es[i].Leaf)
			if err == nil && e.EnvelopeID == envelopeID && match(e) {
				return es[i].Index, es[i].Leaf, nil
			}
		}
		if len(es) > 0 && es[0].Time.Before(notBefore) {
			break
		}
		end = start
	}
	return 0, nil, fmt.Errorf("%w: envelope %s is not in the log of %s/%s", storage.ErrInvalid, envelopeID, tenant, person)
}

// tailScan bounds the leaves HasLeafOf reads back from the end of a log:
// a decision follows its envelope within a few leaves, and a check must
// cost the same for a person who sends a thousand messages a minute.
const tailScan = 64

// HasLeafOf reports whether the person's log holds the leaf that source
// caused (Request.SourceID of its append) among its last leaves: the
// ledger's writer records a decision only after its envelope's entry. A
// leaf this process appended or read recently is found in memory, without
// I/O; otherwise the log is brought up to date and its last tailScan
// leaves stored at or after since (stream time) are read. false means
// "not among the last leaves": an older leaf is not looked for.
func (s *Store) HasLeafOf(ctx context.Context, tenant, person, source string, since time.Time) (bool, error) {
	msgID := MsgID(source)
	ls, err := s.acquire(tenant, person)
	if err != nil {
		return false, err
	}
	ls.mu.Lock()
	hit := ls.loaded && ls.remembers(msgID)
	ls.mu.Unlock()
	s.release(ls)
	if hit {
		return true, nil
	}
	found := false
	err = s.withLog(ctx, tenant, person, func(ls *logState) error {
		if ls.remembers(msgID) {
			found = true
			return nil
		}
		end := ls.tree.size
		start := max(end-tailScan, 0)
		if start == end {
			return nil
		}
		seq, err := ls.tree.seqOf(ctx, kvGet(s.trees), start)
		if err != nil {
			return err
		}
		n := int64(0)
		err = s.readFrom(ctx, ls.subject, seq, 0, func(m *jetstream.RawStreamMsg) bool {
			n++
			if !m.Time.Before(since) {
				if lm, err := decodeLeaf(m); err == nil && lm.msgID == msgID {
					found = true
				}
			}
			return !found && start+n < end
		})
		if err != nil {
			return fmt.Errorf("ledger: looking for the leaf of %s in %s: %w", source, ls.subject, err)
		}
		return nil
	})
	if errors.Is(err, storage.ErrNoLog) {
		return false, nil
	}
	return found, err
}
