package jsstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// readBatch is how many leaves one batched direct get asks for, and
// readTimeout how long it may take (a batch cut short is resumed).
const (
	readBatch   = 256
	readTimeout = 30 * time.Second
)

// leafMsg is one leaf message as read from the stream.
type leafMsg struct {
	seq     uint64
	time    time.Time
	msgID   string
	index   uint64 // as the message says
	leaf    []byte
	opening []byte
}

func decodeLeaf(m *jetstream.RawStreamMsg) (*leafMsg, error) {
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return nil, err
	}
	body := ev.GetLedgerEntryAppended()
	if body == nil || len(body.GetLeaf()) == 0 {
		return nil, fmt.Errorf("ledger: message %d on %s is not a leaf (%s)", m.Sequence, m.Subject, bus.Kind(ev))
	}
	return &leafMsg{seq: m.Sequence, time: m.Time, msgID: m.Header.Get(jetstream.MsgIDHeader),
		index: body.GetIndex(), leaf: body.GetLeaf(), opening: body.GetSealedOpening()}, nil
}

// lastMsg is the last leaf message of a subject; nil when there is none.
func (s *Store) lastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: last leaf on %s: %w", subject, err)
	}
	return m, nil
}

// readFrom calls fn for the messages of subject from stream sequence from
// on, in order, until fn returns false, up to and including sequence until
// (0: the end of the stream). Batched direct gets: one request per
// readBatch messages. A read cut short (a timeout ends the server's reply
// early without an error) resumes where it stopped; with until set, it
// fails if the messages before until do not all arrive.
func (s *Store) readFrom(ctx context.Context, subject string, from, until uint64, fn func(*jetstream.RawStreamMsg) bool) error {
	next := max(from, 1)
	for silent := 0; ; {
		if until > 0 && next > until {
			return nil
		}
		got, last, end, stop, err := s.getBatch(ctx, subject, next, fn)
		if err != nil || stop {
			return err
		}
		if got > 0 {
			next, silent = last+1, 0
		}
		if end || (got == 0 && until == 0) {
			if until > 0 && next <= until {
				return fmt.Errorf("ledger: read %s: stopped at sequence %d, want up to %d", subject, next, until)
			}
			return nil
		}
		// A batch cut short by its deadline: go on where it stopped. On a
		// large stream a person's leaves are scattered over many blocks,
		// which the server may have to read from disk one by one.
		if got == 0 {
			if silent++; silent >= 3 || ctx.Err() != nil {
				return fmt.Errorf("ledger: read %s from %d: no answer (want up to %d)", subject, next, until)
			}
		}
	}
}

// getBatch is one batched direct get of up to readBatch messages of
// subject from sequence from on, each passed to fn. It reports how many
// arrived, the last one's sequence, whether the server said there are no
// more (end), and whether fn asked to stop.
func (s *Store) getBatch(ctx context.Context, subject string, from uint64, fn func(*jetstream.RawStreamMsg) bool) (got int, last uint64, end, stop bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	it, err := jetstreamext.GetBatch(rctx, s.js, s.stream, readBatch, jetstreamext.GetBatchSeq(from), jetstreamext.GetBatchSubject(subject))
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("ledger: read %s from %d: %w", subject, from, err)
	}
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return got, last, true, false, nil
		}
		if err != nil {
			return got, last, false, false, fmt.Errorf("ledger: read %s from %d: %w", subject, from, err)
		}
		got++
		last = m.Sequence
		if !fn(m) {
			return got, last, false, true, nil
		}
		if m.Header.Get("Nats-Num-Pending") == "0" {
			end = true
		}
	}
	return got, last, end, false, nil
}

// replay applies the leaves stored from sequence from on to ls's tree, up
// to the subject's last message, calling seen for each.
func (s *Store) replay(ctx context.Context, ls *logState, from uint64, seen func(*leafMsg)) error {
	last, err := s.lastMsg(ctx, ls.subject)
	if err != nil {
		return err
	}
	t := ls.tree
	if (last == nil && t.size > 0) || (last != nil && last.Sequence < t.lastSeq) {
		// The stream lost leaves this tree has: it was replaced under us.
		return fmt.Errorf("%w: %s ends before sequence %d", errStale, ls.subject, t.lastSeq)
	}
	if last == nil || last.Sequence < from {
		return nil
	}
	get := kvGet(s.trees)
	var aerr error
	err = s.readFrom(ctx, ls.subject, from, last.Sequence, func(m *jetstream.RawStreamMsg) bool {
		if m.Sequence <= t.lastSeq {
			return true
		}
		lm, err := decodeLeaf(m)
		if err != nil {
			aerr = err
			return false
		}
		if lm.index != uint64(t.size) {
			// The position is the index; a message naming another index
			// was not written by this store's appender.
			s.log.Error("ledger leaf message names another index than its position", "subject", ls.subject,
				"seq", lm.seq, "says", lm.index, "position", t.size)
		}
		lm.index = uint64(t.size)
		if aerr = t.apply(ctx, get, lm.seq, lm.leaf); aerr != nil {
			return false
		}
		s.m.replayed.Inc()
		ls.remember(lm.msgID)
		if seen != nil {
			seen(lm)
		}
		return true
	})
	if err == nil {
		err = aerr
	}
	return err
}

// syncTail brings a loaded tree up to the end of its subject.
func (s *Store) syncTail(ctx context.Context, ls *logState) error {
	return s.replay(ctx, ls, ls.tree.lastSeq+1, nil)
}

// ensureLoaded loads ls's tree on first use: the KV snapshot, checked, and
// the leaves stored after it; or, when the snapshot is stale or missing,
// the whole log from the stream.
func (s *Store) ensureLoaded(ctx context.Context, ls *logState) error {
	if ls.loaded {
		return nil
	}
	t := newTree(ls.key)
	ls.tree = t
	ls.recent, ls.recentNext = [recentLeaves]uint64{}, 0
	from := "rebuilt"
	var err error
	if !ls.rebuild {
		err = t.loadSnapshot(ctx, kvGet(s.trees))
		if err == nil {
			err = s.checkTail(ctx, ls)
		}
		from = "snapshot"
		if t.size == 0 {
			from = "empty"
		}
	}
	if errors.Is(err, errStale) || ls.rebuild {
		if err != nil {
			s.log.Warn("ledger tree snapshot is stale; rebuilding from the stream", "log", ls.key, "err", err)
		}
		t.reset()
		t.savedSize = -1 // overwrite the snapshot at the next round
		err, from = nil, "rebuilt"
	}
	if err == nil {
		err = s.syncTail(ctx, ls)
	}
	if err != nil {
		return fmt.Errorf("ledger: load log %s: %w", ls.subject, err)
	}
	if from == "empty" && t.size > 0 {
		from = "rebuilt"
	}
	s.m.loads.WithLabelValues(from).Inc()
	ls.loaded, ls.rebuild = true, false
	return nil
}

// checkTail checks a snapshot against the stream: its last leaf must be
// the message at its last sequence, with the same hash.
func (s *Store) checkTail(ctx context.Context, ls *logState) error {
	t := ls.tree
	if t.size == 0 {
		return nil
	}
	m, err := s.st.GetMsg(ctx, t.lastSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("%w: leaf %d of %s (sequence %d) is not in the stream", errStale, t.size-1, ls.subject, t.lastSeq)
	}
	if err != nil {
		return fmt.Errorf("ledger: read leaf at %d: %w", t.lastSeq, err)
	}
	lm, err := decodeLeaf(m)
	if err != nil || m.Subject != ls.subject {
		return fmt.Errorf("%w: sequence %d is not a leaf of %s", errStale, t.lastSeq, ls.subject)
	}
	h, err := t.leafHash(ctx, kvGet(s.trees), t.size-1)
	if err != nil {
		return err
	}
	if h != ledgerlog.LeafHash(lm.leaf) {
		return fmt.Errorf("%w: leaf %d of %s differs from the snapshot", errStale, t.size-1, ls.subject)
	}
	return nil
}

// scanSince calls fn for the leaves of subject stored at or after since,
// until fn returns false.
func (s *Store) scanSince(ctx context.Context, subject string, since time.Time, fn func(*leafMsg) bool) error {
	it, err := jetstreamext.GetBatch(ctx, s.js, s.stream, readBatch, jetstreamext.GetBatchStartTime(since), jetstreamext.GetBatchSubject(subject))
	if err != nil {
		return fmt.Errorf("ledger: scan %s since %s: %w", subject, since, err)
	}
	var from uint64
	for m, err := range it {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ledger: scan %s since %s: %w", subject, since, err)
		}
		lm, err := decodeLeaf(m)
		if err != nil {
			return err
		}
		if !fn(lm) {
			return nil
		}
		from = m.Sequence + 1
		if m.Header.Get("Nats-Num-Pending") == "0" {
			return nil
		}
	}
	if from == 0 {
		return nil
	}
	// More than one batch: continue by sequence.
	var ferr error
	err = s.readFrom(ctx, subject, from, 0, func(m *jetstream.RawStreamMsg) bool {
		lm, err := decodeLeaf(m)
		if err != nil {
			ferr = err
			return false
		}
		return fn(lm)
	})
	if err == nil {
		err = ferr
	}
	return err
}

// indexOfSeq finds the leaf stored at stream sequence seq in ls's tree
// (binary search over the sequence tiles).
func (s *Store) indexOfSeq(ctx context.Context, ls *logState, seq uint64) (uint64, error) {
	t := ls.tree
	get := kvGet(s.trees)
	lo, hi := int64(0), t.size
	for lo < hi {
		mid := (lo + hi) / 2
		v, err := t.seqOf(ctx, get, mid)
		if err != nil {
			return 0, err
		}
		switch {
		case v == seq:
			return uint64(mid), nil
		case v < seq:
			lo = mid + 1
		default:
			hi = mid
		}
	}
	return 0, fmt.Errorf("ledger: no leaf of %s at sequence %d", ls.subject, seq)
}
