package inbox

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
)

// Agent is who reads an inbox: what the agent's credential proves, never
// what a request says.
type Agent struct {
	Tenant, PersonID, AgentID string
	Class                     alpv1.TrustClass
}

// Query selects a page of items.
type Query struct {
	// After is the cursor of the last item of the previous page ("" for
	// the first page).
	After string
	// Limit is the page size, 1 to MaxPageSize (0: DefaultPageSize).
	Limit int
	// IncludeAcked includes the items this agent acknowledged already.
	IncludeAcked bool
}

// Page is one page of items, oldest first.
type Page struct {
	Items []Item
	// Next is the cursor to pass as After for the next page; empty when
	// there is none.
	Next string
}

// CursorError is a cursor this inbox did not make.
type CursorError struct{ Cursor string }

func (e *CursorError) Error() string {
	return "inbox: invalid cursor: pass back the next cursor of a page, unchanged"
}

// LimitError is a page size out of range.
type LimitError struct{ Limit int }

func (e *LimitError) Error() string {
	return fmt.Sprintf("inbox: limit %d is out of range 1 to %d", e.Limit, MaxPageSize)
}

// cursorPrefix versions the cursor format.
const cursorPrefix = "c1."

func cursorOf(seq uint64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatUint(seq, 10)))
}

func parseCursor(c string) (uint64, error) {
	if c == "" {
		return 0, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(c) > 64 {
		return 0, &CursorError{c}
	}
	n, ok := strings.CutPrefix(string(raw), cursorPrefix)
	seq, err := strconv.ParseUint(n, 10, 64)
	if !ok || err != nil || seq == 0 || strconv.FormatUint(seq, 10) != n {
		return 0, &CursorError{c}
	}
	return seq, nil
}

// List is a page of the agent's person's items the agent has not
// acknowledged (or all, with IncludeAcked), oldest first, each in the
// view of the agent's trust class.
func (s *Store) List(ctx context.Context, a Agent, q Query) (Page, error) {
	after, err := parseCursor(q.After)
	if err != nil {
		return Page{}, err
	}
	limit := q.Limit
	switch {
	case limit == 0:
		limit = DefaultPageSize
	case limit < 0 || limit > MaxPageSize:
		return Page{}, &LimitError{limit}
	}
	p, err := s.open(ctx, a.Tenant, a.PersonID)
	if err != nil {
		return Page{}, err
	}
	tok := streams.AgentToken(a.AgentID)
	// An item stands at its place in the inbox, or, for this agent, at
	// the latest decision that released something of it: offered again
	// there, after what the agent has read.
	type candidate struct {
		e     *entry
		at    uint64
		acked bool
		ds    []decision
	}
	var picked []candidate
	sorted := true
	p.f.RLock()
	for _, e := range p.items {
		at := e.seq
		if len(e.decisions) > 0 {
			at = s.offered(a, e)
		}
		if at <= after {
			continue
		}
		acked := s.acked(p, a, tok, e)
		if !q.IncludeAcked && acked {
			continue
		}
		if n := len(picked); n > 0 && at < picked[n-1].at {
			sorted = false
		}
		picked = append(picked, candidate{e: e, at: at, acked: acked, ds: e.decisions})
	}
	p.f.RUnlock()
	if !sorted {
		slices.SortStableFunc(picked, func(x, y candidate) int { return cmp.Compare(x.at, y.at) })
	}
	more := len(picked) > limit
	if more {
		picked = picked[:limit]
	}
	page := Page{Items: make([]Item, 0, len(picked))}
	for _, c := range picked {
		it, err := s.item(ctx, a, c.e, c.ds, c.acked)
		if err != nil {
			return Page{}, err
		}
		it.Cursor = cursorOf(c.at)
		page.Items = append(page.Items, it)
	}
	if more {
		page.Next = cursorOf(picked[len(picked)-1].at)
	}
	return page, nil
}

// Get is one item of the agent's person's inbox, acknowledged or not.
func (s *Store) Get(ctx context.Context, a Agent, id string) (Item, error) {
	p, err := s.open(ctx, a.Tenant, a.PersonID)
	if err != nil {
		return Item{}, err
	}
	p.f.RLock()
	e := p.byID[id]
	var ds []decision
	var acked bool
	var at uint64
	if e != nil {
		ds, acked, at = e.decisions, s.acked(p, a, streams.AgentToken(a.AgentID), e), s.offered(a, e)
	}
	p.f.RUnlock()
	if e == nil {
		return Item{}, fmt.Errorf("%w: %q", ErrNotFound, clip(id))
	}
	it, err := s.item(ctx, a, e, ds, acked)
	it.Cursor = cursorOf(at)
	return it, err
}

// Ack records that the agent has the items: they are not offered to it
// again. All or nothing: an id that is not an item of the agent's person
// acknowledges none (ErrNotFound). Acknowledging an item twice is no
// error; acked counts the items acknowledged by this call.
func (s *Store) Ack(ctx context.Context, a Agent, ids ...string) (acked int, err error) {
	if len(ids) == 0 || len(ids) > MaxAckBatch {
		return 0, fmt.Errorf("%w: acknowledge 1 to %d items at a time", ErrInvalid, MaxAckBatch)
	}
	p, err := s.open(ctx, a.Tenant, a.PersonID)
	if err != nil {
		return 0, err
	}
	tok := streams.AgentToken(a.AgentID)
	var todo []ackTodo
	seen := map[string]bool{}
	p.f.RLock()
	for _, id := range ids {
		e := p.byID[id]
		if e == nil {
			p.f.RUnlock()
			return 0, fmt.Errorf("%w: %q", ErrNotFound, clip(id))
		}
		if !seen[id] && !s.acked(p, a, tok, e) {
			st := p.acks[tok][id]
			todo = append(todo, ackTodo{e: e, ds: e.decisions, base: st == nil || !st.base})
		}
		seen[id] = true
	}
	p.f.RUnlock()
	if len(todo) == 0 {
		return 0, nil
	}
	// The appends go out together; each is once per subject, so a retry
	// after a partial failure writes only what is missing.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		last uint64
		errs []error
	)
	sem := make(chan struct{}, 16)
	for _, e := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			seq, err := s.ack(ctx, a, tok, e.e, e.ds, e.base)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			last = max(last, seq)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// Read your writes: the next List of this agent leaves them out.
	if last > 0 {
		if err := p.f.WaitApplied(ctx, last); err != nil {
			return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return len(todo), nil
}

// ErrInvalid marks a request the agent must fix.
var ErrInvalid = errors.New("inbox: invalid request")

// ackTodo is one item to acknowledge: its decisions as read, and whether
// the item as first offered is still unacknowledged.
type ackTodo struct {
	e    *entry
	ds   []decision
	base bool
}

// ack acknowledges the item as the agent sees it now: the item (once, on
// its acknowledgement subject) and the latest release to the agent, if
// any (once, on that release's). Each InboxAcked says what the agent's
// view left out then.
func (s *Store) ack(ctx context.Context, a Agent, tok string, e *entry, ds []decision, base bool) (uint64, error) {
	v := s.view(a, e.dv, ds)
	var last uint64
	write := func(subject string, err error) error {
		if err != nil {
			return err
		}
		ev := s.o.NewEvent("inbox_acked", a.Tenant, nil, e.id, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_AGENT, Id: a.AgentID})
		ev.Body = &alpv1.Event_InboxAcked{InboxAcked: &alpv1.InboxAcked{
			RecipientPersonId: a.PersonID, EnvelopeId: e.id, AgentId: a.AgentID, AgentClass: a.Class,
			Withheld: v.withheld, Held: v.heldIDs,
		}}
		seq, err := s.o.Bus.Append(ctx, subject, 0, ev)
		if errors.Is(err, bus.ErrConflict) {
			return nil // acknowledged already (another replica, a retry)
		}
		if err != nil {
			return fmt.Errorf("inbox: acknowledging %s: %w", e.id, err)
		}
		last = max(last, seq)
		return nil
	}
	if base {
		if err := write(streams.InboxAckSubject(a.Tenant, a.PersonID, tok, e.id)); err != nil {
			return 0, err
		}
	}
	if v.last != nil {
		if err := write(streams.InboxReleaseAckSubject(a.Tenant, a.PersonID, tok, e.id, v.last.held.GetId())); err != nil {
			return 0, err
		}
	}
	return last, nil
}

// Watch tells the caller, on the channel, when the agent's person's inbox
// has new items: a value means "List again". The channel holds one value
// and the inbox never waits for it, so a slow watcher only misses words it
// did not need. stop ends the watch (the channel is then closed); so does
// the inbox going away (Close, erasure).
func (s *Store) Watch(ctx context.Context, a Agent) (<-chan struct{}, func(), error) {
	p, err := s.open(ctx, a.Tenant, a.PersonID)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	p.wmu.Lock()
	if p.watchers == nil {
		p.wmu.Unlock()
		return nil, nil, ErrUnavailable
	}
	p.watchers[ch] = struct{}{}
	p.wmu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			p.wmu.Lock()
			if _, ok := p.watchers[ch]; ok {
				delete(p.watchers, ch)
				close(ch)
			}
			p.wmu.Unlock()
			s.mu.Lock()
			p.used = time.Now()
			s.mu.Unlock()
		})
	}
	return ch, stop, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
