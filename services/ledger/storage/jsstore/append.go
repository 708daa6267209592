package jsstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
)

// Kind is the event kind of a leaf message.
const Kind = "ledger_entry_appended"

// Request asks for one leaf in a person's log.
type Request struct {
	Tenant, Person string
	// SourceID is the cause of the entry: the source event's id, or a
	// command id derived from what the command is about. The leaf message
	// is the event it caused (causation id) and its Nats-Msg-Id is
	// hash(SourceID, kind), so one source yields at most one leaf.
	SourceID    string
	Correlation string
	// Build makes the leaf and its sealed opening (nil for none) for the
	// given index. It is called again with another index after a conflict,
	// so it must not have effects.
	Build func(index uint64) (leaf, sealedOpening []byte, err error)
	// Since, for a redelivered source event, is the earliest time its leaf
	// can have been stored (the event's own time): the log is searched
	// from then on for a leaf of SourceID before anything is appended.
	Since time.Time
}

// Result says where a request's leaf is.
type Result struct {
	Index    uint64
	Sequence uint64
	// Duplicate: the leaf was stored by an earlier attempt for the same
	// source (nothing was appended now).
	Duplicate bool
}

// ErrTooManyConflicts: the log kept growing under the append; it is
// retried later (the consumer redelivers).
var ErrTooManyConflicts = errors.New("ledger: append kept conflicting with other writers")

type pending struct {
	req   *Request
	msgID string
	leaf  []byte // as last built
	res   Result
	err   error
	done  chan struct{}
}

func (p *pending) resolve(r Result, err error) {
	p.res, p.err = r, err
	close(p.done)
}

func newEvent(req *Request) *alpv1.Event {
	return &alpv1.Event{Header: &alpv1.EventHeader{
		Type:          Kind,
		SchemaVersion: 1,
		EventId:       uuid.Must(uuid.NewV7()).String(),
		CausationId:   req.SourceID,
		CorrelationId: req.Correlation,
		Actor:         &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_SERVICE, Id: "ledger"},
		Tenant:        req.Tenant,
		ProducerRole:  alpv1.Role_ROLE_LEDGER,
		Occurred:      timestamppb.Now(),
	}}
}

// MsgID is the Nats-Msg-Id of the leaf a source causes.
func MsgID(sourceID string) string { return bus.MsgIDFor(sourceID, Kind) }

// Append adds the request's leaf at the end of the person's log and
// returns where it is. Concurrent Appends to one log are published
// together as one atomic batch.
func (s *Store) Append(ctx context.Context, req Request) (Result, error) {
	if req.SourceID == "" || req.Build == nil {
		return Result{}, errors.New("ledger: append needs a source id and a builder")
	}
	ls, err := s.acquire(req.Tenant, req.Person)
	if err != nil {
		return Result{}, err
	}
	defer s.release(ls)
	p := &pending{req: &req, msgID: MsgID(req.SourceID), done: make(chan struct{})}
	ls.qmu.Lock()
	ls.queue = append(ls.queue, p)
	lead := !ls.leading
	ls.leading = true
	ls.qmu.Unlock()
	if lead {
		// The group's appends outlive any one caller's context: others
		// wait on them.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.AppendTimeout)
		s.lead(lctx, ls)
		cancel()
	}
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return Result{}, fmt.Errorf("ledger: append to %s: %w", ls.subject, ctx.Err())
	}
}

// lead appends what is queued for ls, batch after batch, until the queue
// is empty.
func (s *Store) lead(ctx context.Context, ls *logState) {
	for {
		ls.qmu.Lock()
		if len(ls.queue) == 0 {
			ls.leading = false
			ls.qmu.Unlock()
			return
		}
		n := min(len(ls.queue), s.opts.MaxBatch)
		batch := append([]*pending(nil), ls.queue[:n]...)
		ls.queue = append(ls.queue[:0:0], ls.queue[n:]...)
		ls.qmu.Unlock()
		start := time.Now()
		s.appendBatch(ctx, ls, batch)
		s.m.appendSeconds.Observe(time.Since(start).Seconds())
	}
}

func failAll(items []*pending, err error) {
	for _, p := range items {
		p.resolve(Result{}, err)
	}
}

// appendBatch stores items at the end of the log, resolving each.
func (s *Store) appendBatch(ctx context.Context, ls *logState, items []*pending) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	get := kvGet(s.trees)
	if err := s.ensureLoaded(ctx, ls); err != nil {
		failAll(items, err)
		return
	}
	items = s.resolveRedelivered(ctx, ls, items)
	singles := false
	// attempt counts the failed publishes of this group.
	for attempt := 0; len(items) > 0; {
		if attempt >= s.opts.MaxAttempts {
			failAll(items, fmt.Errorf("%w: %s after %d attempts", ErrTooManyConflicts, ls.subject, attempt))
			return
		}
		if ctx.Err() != nil {
			failAll(items, fmt.Errorf("ledger: append to %s: %w", ls.subject, ctx.Err()))
			return
		}
		t := ls.tree
		round := items
		// An atomic batch costs the server a fixed few milliseconds (an R1
		// file stream stages each batch in its own file store), so small
		// groups go one by one, each expecting the sequence the previous
		// one was acknowledged at.
		if singles || len(items) < s.opts.BatchThreshold {
			round = items[:1]
		}
		msgs, round, failed := s.build(ls, round, uint64(t.size))
		if len(failed) > 0 {
			items = without(items, failed)
			continue
		}
		first, dup, err := s.publish(ctx, ls.subject, t.lastSeq, msgs)
		if err == nil && dup {
			// A single publish the server deduplicated: the leaf is
			// already in the log (the expectation held, so it is in the
			// tree too).
			s.m.duplicates.Inc()
			ls.remember(round[0].msgID)
			idx, _ := s.indexOfSeq(ctx, ls, first)
			round[0].resolve(Result{Index: idx, Sequence: first, Duplicate: true}, nil)
			s.touch(ls, 0) // the attempt that stored it may have died before signing
			items = items[1:]
			continue
		}
		if err == nil {
			if hook := s.opts.AfterPublish; hook != nil {
				if herr := hook(ls.tenant, ls.person, uint64(t.size), len(round)); herr != nil {
					ls.loaded = false // as after a crash: reload from KV and the stream
					failAll(items, herr)
					return
				}
			}
			for i, p := range round {
				leaf := p.leaf
				if aerr := t.apply(ctx, get, first+uint64(i), leaf); aerr != nil {
					ls.loaded, ls.rebuild = false, errors.Is(aerr, errStale)
					failAll(items, fmt.Errorf("ledger: applying leaf to %s: %w", ls.subject, aerr))
					return
				}
				ls.remember(p.msgID)
				p.resolve(Result{Index: uint64(t.size - 1), Sequence: first + uint64(i)}, nil)
			}
			s.m.appended.Add(float64(len(round)))
			s.m.batchSize.Observe(float64(len(round)))
			s.touch(ls, len(round))
			items = items[len(round):]
			singles = false
			continue
		}
		attempt++
		switch {
		case bus.IsWrongLastSequence(err):
			s.m.conflicts.Inc()
		case isDuplicateInBatch(err):
			// A retried batch inside the dedupe window; if the catch-up
			// finds nothing, the duplicates are older than our view:
			// publish one by one, which reports them one by one.
		case isTooManyBatches(err):
			// The server's limit of batches in flight: one by one for now.
			singles = true
		default:
			s.log.Warn("ledger append failed; reading the log before retrying", "subject", ls.subject, "attempt", attempt, "err", err)
		}
		before := len(items)
		var cerr error
		items, cerr = s.catchUp(ctx, ls, items)
		if cerr != nil {
			ls.loaded, ls.rebuild = false, errors.Is(cerr, errStale)
			failAll(items, fmt.Errorf("ledger: append to %s: %v; then reading the log: %w", ls.subject, err, cerr))
			return
		}
		if isDuplicateInBatch(err) && len(items) == before {
			singles = true
		}
		if !bus.IsWrongLastSequence(err) && !isDuplicateInBatch(err) && !isTooManyBatches(err) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(min(attempt, 20)) * 50 * time.Millisecond):
			}
		}
	}
}

func without(items, drop []*pending) []*pending {
	out := items[:0:0]
	for _, p := range items {
		keep := true
		for _, d := range drop {
			keep = keep && p != d
		}
		if keep {
			out = append(out, p)
		}
	}
	return out
}

// build renders the leaf messages of items from index first on. Items
// whose builder fails are resolved with the error and returned in failed.
func (s *Store) build(ls *logState, items []*pending, first uint64) (msgs []*nats.Msg, built []*pending, failed []*pending) {
	for i, p := range items {
		index := first + uint64(i)
		leaf, opening, err := p.req.Build(index)
		if err != nil {
			p.resolve(Result{}, fmt.Errorf("ledger: build entry %d of %s: %w", index, ls.subject, err))
			failed = append(failed, p)
			continue
		}
		msg, err := bus.NewMsg(ls.subject, s.ledgerEvent(p.req, index, leaf, opening))
		if err != nil {
			p.resolve(Result{}, err)
			failed = append(failed, p)
			continue
		}
		p.leaf = leaf
		msgs = append(msgs, msg)
		built = append(built, p)
	}
	return msgs, built, failed
}

// publish stores msgs after the subject's last sequence expected: one
// message with a plain expected-sequence publish, several as one atomic
// batch with the expectation on the first. It returns the sequence of the
// first message, and dup when a single publish was deduplicated.
func (s *Store) publish(ctx context.Context, subject string, expected uint64, msgs []*nats.Msg) (first uint64, dup bool, err error) {
	if len(msgs) == 1 {
		ack, err := s.js.PublishMsg(ctx, msgs[0], jetstream.WithExpectLastSequencePerSubject(expected))
		if err != nil {
			return 0, false, err
		}
		return ack.Sequence, ack.Duplicate, nil
	}
	msgs[0].Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expected, 10))
	ack, err := jetstreamext.PublishMsgBatch(ctx, s.js, msgs)
	if err != nil {
		return 0, false, err
	}
	if ack.BatchSize != uint64(len(msgs)) || ack.Sequence < uint64(len(msgs)) {
		return 0, false, fmt.Errorf("ledger: batch ack for %d of %d messages", ack.BatchSize, len(msgs))
	}
	return ack.Sequence - uint64(len(msgs)) + 1, false, nil
}

func isTooManyBatches(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstreamext.JSErrCodeAtomicPublishTooManyInflight ||
		apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishTooManyInflight)
}

func isDuplicateInBatch(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishDuplicateMsgID
}

// catchUp applies the leaves stored after the tree's last one, resolving
// the items whose message ids it meets (an earlier attempt stored them),
// and returns the items still to append.
func (s *Store) catchUp(ctx context.Context, ls *logState, items []*pending) ([]*pending, error) {
	want := map[string]*pending{}
	for _, p := range items {
		want[p.msgID] = p
	}
	err := s.replay(ctx, ls, ls.tree.lastSeq+1, func(m *leafMsg) {
		if p := want[m.msgID]; p != nil {
			s.m.duplicates.Inc()
			p.resolve(Result{Index: m.index, Sequence: m.seq, Duplicate: true}, nil)
			delete(want, m.msgID)
		}
	})
	if len(want) < len(items) {
		s.touch(ls, 0) // leaves an earlier attempt stored may not be signed yet
	}
	if err != nil {
		return items, err
	}
	var rest []*pending
	for _, p := range items {
		if want[p.msgID] != nil {
			rest = append(rest, p)
		}
	}
	return rest, nil
}

// resolveRedelivered looks for the leaves of redelivered sources (Since
// set) in the log and resolves those found; it returns the others. The log
// is first brought up to date, so a leaf stored by another replica counts.
func (s *Store) resolveRedelivered(ctx context.Context, ls *logState, items []*pending) []*pending {
	var since time.Time
	want := map[string]*pending{}
	for _, p := range items {
		if p.req.Since.IsZero() {
			continue
		}
		if since.IsZero() || p.req.Since.Before(since) {
			since = p.req.Since
		}
		want[p.msgID] = p
	}
	if len(want) == 0 {
		return items
	}
	if err := s.syncTail(ctx, ls); err != nil {
		ls.loaded, ls.rebuild = false, errors.Is(err, errStale)
		failAll(items, err)
		return nil
	}
	// Stream times and event times come from different clocks.
	found := false
	err := s.scanSince(ctx, ls.subject, since.Add(-time.Minute), func(m *leafMsg) bool {
		if p := want[m.msgID]; p != nil {
			s.m.duplicates.Inc()
			ls.remember(m.msgID)
			p.resolve(Result{Index: m.index, Sequence: m.seq, Duplicate: true}, nil)
			delete(want, m.msgID)
			found = true
		}
		return len(want) > 0
	})
	if found {
		// The writer that stored them may have died before signing them.
		s.touch(ls, 0)
	}
	if err != nil {
		failAll(items, fmt.Errorf("ledger: looking for earlier leaves of redelivered events in %s: %w", ls.subject, err))
		return nil
	}
	var rest []*pending
	for _, p := range items {
		if p.req.Since.IsZero() || want[p.msgID] != nil {
			rest = append(rest, p)
		}
	}
	return rest
}
