// Package inbox is each person's durable inbox and each of their agents'
// delivery state, owned by ingress (docs/agents.md, "The inbox").
//
// Policy's recipient-side decision (a Deliverable on the deliver stream)
// is filed once as an item of the recipient's inbox,
// alp.inbox.<tenant>.<person>.item.<envelope>, written with "nothing on
// this subject yet" as expectation, so a redelivered Deliverable files
// nothing twice. An agent's acknowledgement is an InboxAcked event on
// alp.inbox.<tenant>.<person>.ack.<agent token>.<envelope>, written once
// the same way; the ledger records each as a delivery. An item is offered
// to every agent of the person, in the view of the agent's trust class,
// with a stable id (the envelope id) until that agent acknowledges it, and
// never again after.
//
// A replica reads a person's inbox from the stream when one of their
// agents first asks (a projection with an ordered reader,
// internal/projection), keeps following it while agents ask or listen,
// and lets it go when idle. Items are kept for bus.inbox_max_age; an
// erased person's inbox is purged (and its views were sealed with the
// person's data key, which erasure destroys).
package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/internal/streams"
)

// Errors.
var (
	// ErrNotFound: no such item in the agent's person's inbox. An item of
	// another person is not found either: the answer never tells the two
	// apart.
	ErrNotFound = errors.New("inbox: no such item")
	// ErrUnavailable: the inbox cannot be read or written now (NATS,
	// identity, the data keys): the agent retries.
	ErrUnavailable = errors.New("inbox: unavailable")
)

// Tuning.
const (
	// DefaultPageSize and MaxPageSize bound List.
	DefaultPageSize = 20
	MaxPageSize     = 100
	// MaxAckBatch bounds the ids of one Ack.
	MaxAckBatch = 100
)

// NewEventFunc makes an event header the way the owning service does
// (service.Base.NewEvent).
type NewEventFunc func(kind, tenant string, cause *alpv1.Event, correlation string, actor *alpv1.Actor) *alpv1.Event

// Options are what a Store needs.
type Options struct {
	Bus     *bus.Bus
	Sealer  *seal.Sealer
	Tenants alp.Tenants
	// People is identity's projection (agents' names and classes for the
	// sender line, erased people); nil until it is open.
	People   func() *identitystore.Store
	NewEvent NewEventFunc
	Log      *slog.Logger
	// IdleAfter lets a person's inbox go from memory when no agent asked
	// or listened for this long (default 5m).
	IdleAfter time.Duration
	// MaxPeople bounds the inboxes a replica keeps in memory (default
	// 10000); beyond it the least recently used idle one goes first.
	MaxPeople int
}

// Store is the inboxes of the people a broker hosts. Safe for concurrent
// use.
type Store struct {
	o   Options
	log *slog.Logger

	mu     sync.Mutex
	people map[string]*person // by tenant/person id
	closed bool
}

// New makes a Store; Sweep lets idle inboxes go, Close releases them all.
func New(o Options) *Store {
	if o.IdleAfter <= 0 {
		o.IdleAfter = 5 * time.Minute
	}
	if o.MaxPeople <= 0 {
		o.MaxPeople = 10000
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Store{o: o, log: o.Log.With("component", "inbox"), people: map[string]*person{}}
}

// Close stops following every inbox.
func (s *Store) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	ps := s.people
	s.people = map[string]*person{}
	s.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
}

// person is one person's inbox as this replica follows it.
type person struct {
	tenant, id string
	ready      chan struct{} // closed when f is open or err is set
	err        error
	f          *projection.Follower

	// Under f's lock (written by apply).
	items []*entry
	byID  map[string]*entry
	acks  map[string]map[string]*ackState // agent token → envelope id → what it acknowledged
	// early are decisions that arrived before their envelope's item, by
	// envelope id.
	early map[string][]decision

	wmu      sync.Mutex
	watchers map[chan struct{}]struct{}
	used     time.Time // under Store.mu
}

// entry is one item.
type entry struct {
	seq      uint64
	id       string
	dv       *alpv1.Deliverable
	received time.Time
	// decisions are the person's on the item's held items, in inbox
	// order (append-only: a reader may keep a copy of the slice).
	decisions []decision
}

func (p *person) close() {
	<-p.ready
	if p.f != nil {
		p.f.Close()
	}
	p.wmu.Lock()
	for ch := range p.watchers {
		close(ch)
	}
	p.watchers = nil
	p.wmu.Unlock()
}

func key(tenant, personID string) string { return tenant + "/" + personID }

// open is the person's inbox, read from the stream on first use. Every
// caller that finds it opening waits for the one open.
func (s *Store) open(ctx context.Context, tenant, personID string) (*person, error) {
	if !s.o.Tenants.Hosts(tenant) {
		return nil, fmt.Errorf("inbox: tenant %q is not hosted here", tenant)
	}
	if err := alp.ValidatePersonID(personID); err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	k := key(tenant, personID)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrUnavailable
	}
	p := s.people[k]
	if p == nil {
		p = &person{tenant: tenant, id: personID, ready: make(chan struct{}), byID: map[string]*entry{},
			acks: map[string]map[string]*ackState{}, watchers: map[chan struct{}]struct{}{}}
		s.people[k] = p
		s.evictLocked()
		go s.follow(p)
	}
	p.used = time.Now()
	s.mu.Unlock()
	select {
	case <-p.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: opening the inbox: %w", ErrUnavailable, ctx.Err())
	}
	if p.err != nil {
		s.mu.Lock()
		if s.people[k] == p {
			delete(s.people, k)
		}
		s.mu.Unlock()
		return nil, p.err
	}
	return p, nil
}

// openTimeout bounds reading one inbox from the stream.
const openTimeout = 10 * time.Second

func (s *Store) follow(p *person) {
	defer close(p.ready)
	filter, err := streams.InboxPersonFilter(p.tenant, p.id)
	if err != nil {
		p.err = fmt.Errorf("inbox: %w", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	f, err := projection.Open(ctx, s.o.Bus, projection.Config{Stream: streams.Inbox, Filters: []string{filter},
		Apply: p.apply, Name: "inbox", Log: s.log, ErrStale: ErrUnavailable, ErrClosed: ErrUnavailable})
	if err != nil {
		p.err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		return
	}
	p.f = f
}

// apply is the projection's: an item, an acknowledgement or the person's
// decision on a held item; a word to whoever listens of each item and
// decision.
func (p *person) apply(subject string, seq uint64, ev *alpv1.Event) error {
	if err := streams.CheckProducer(subject, ev); err != nil {
		return err
	}
	switch body := ev.GetBody().(type) {
	case *alpv1.Event_Deliverable:
		dv := body.Deliverable
		id := dv.GetEnvelope().GetId()
		if id == "" || p.byID[id] != nil {
			return nil
		}
		e := &entry{seq: seq, id: id, dv: dv, received: ev.GetHeader().GetOccurred().AsTime(), decisions: p.early[id]}
		delete(p.early, id)
		p.items = append(p.items, e)
		p.byID[id] = e
		p.notify()
	case *alpv1.Event_InboxAcked:
		p.applyAck(subject, body.InboxAcked)
	case *alpv1.Event_ApprovalDecided:
		p.applyDecision(seq, body.ApprovalDecided)
		p.notify()
	default:
		return fmt.Errorf("inbox: unexpected %s", bus.Kind(ev))
	}
	return nil
}

// notify tells every watcher to look again, never waiting: a watcher that
// has not taken the last word yet needs no second one.
func (p *person) notify() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for ch := range p.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// evictLocked lets the least recently used idle inboxes go while there
// are more than MaxPeople. Under s.mu.
func (s *Store) evictLocked() {
	for len(s.people) > s.o.MaxPeople {
		var oldest *person
		var oldestKey string
		for k, p := range s.people {
			if p.watching() {
				continue
			}
			if oldest == nil || p.used.Before(oldest.used) {
				oldest, oldestKey = p, k
			}
		}
		if oldest == nil {
			return
		}
		delete(s.people, oldestKey)
		go oldest.close()
	}
}

func (p *person) watching() bool {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return len(p.watchers) > 0
}

// Sweep lets idle inboxes go, every minute until ctx ends.
func (s *Store) Sweep(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			for k, p := range s.people {
				if !p.watching() && now.Sub(p.used) > s.o.IdleAfter {
					delete(s.people, k)
					go p.close()
				}
			}
			s.mu.Unlock()
		}
	}
}

// File is the handler of ingress's consumer on the deliver stream: it
// files a Deliverable as an item of the recipient's inbox, once. A refused
// message files nothing, nor does one for a person erased meanwhile.
func (s *Store) File(ctx context.Context, d bus.Delivery) error {
	body, ok := d.Event.GetBody().(*alpv1.Event_Deliverable)
	if !ok {
		return bus.Permanent(fmt.Errorf("inbox: cannot file %s", bus.Kind(d.Event)))
	}
	dv := body.Deliverable
	tenant, personID, envelopeID := d.Event.GetHeader().GetTenant(), dv.GetRecipientPersonId(), dv.GetEnvelope().GetId()
	if !s.o.Tenants.Hosts(tenant) || alp.ValidatePersonID(personID) != nil || envelopeID == "" {
		return bus.Permanent(fmt.Errorf("inbox: deliverable without hosted tenant, recipient or envelope (tenant %q)", tenant))
	}
	if dv.GetOutcome() == alpv1.Outcome_OUTCOME_REFUSE {
		return nil
	}
	people := s.identity()
	if people == nil {
		return fmt.Errorf("%w: identity's projection is not open yet", ErrUnavailable)
	}
	if _, err := people.Person(ctx, tenant, personID); errors.Is(err, identitystore.ErrNotFound) {
		s.log.Info("deliverable for a person who is gone not filed", "tenant", tenant, "envelope", envelopeID)
		return nil
	} else if err != nil {
		return fmt.Errorf("inbox: the recipient: %w", err)
	}
	subject, err := streams.InboxItemSubject(tenant, personID, envelopeID)
	if err != nil {
		return bus.Permanent(err)
	}
	ev := s.o.NewEvent("deliverable", tenant, d.Event, envelopeID, nil)
	ev.Body = &alpv1.Event_Deliverable{Deliverable: dv}
	if _, err := s.o.Bus.Append(ctx, subject, 0, ev); err != nil && !errors.Is(err, bus.ErrConflict) {
		return fmt.Errorf("inbox: filing %s: %w", envelopeID, err)
	}
	return nil
}

func (s *Store) identity() *identitystore.Store {
	if s.o.People == nil {
		return nil
	}
	return s.o.People()
}

// Erase is the handler of ingress's consumer on identity's erasures: it
// purges the person's inbox (items and acknowledgements) and forgets it.
func (s *Store) Erase(ctx context.Context, d bus.Delivery) error {
	body, ok := d.Event.GetBody().(*alpv1.Event_DataKeyDestroyed)
	if !ok {
		return nil // the filter takes erasures only; anything else is not ours
	}
	tenant, personID := body.DataKeyDestroyed.GetTenant(), body.DataKeyDestroyed.GetPersonId()
	if !s.o.Tenants.Hosts(tenant) || alp.ValidatePersonID(personID) != nil {
		return bus.Permanent(fmt.Errorf("inbox: erasure without hosted tenant or person (tenant %q)", tenant))
	}
	filter, err := streams.InboxPersonFilter(tenant, personID)
	if err != nil {
		return bus.Permanent(err)
	}
	st, err := s.o.Bus.JetStream().Stream(ctx, s.o.Bus.StreamName(streams.Inbox))
	if err != nil {
		return fmt.Errorf("inbox: the inbox stream: %w", err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(filter)); err != nil {
		return fmt.Errorf("inbox: purging an erased person's inbox: %w", err)
	}
	k := key(tenant, personID)
	s.mu.Lock()
	p := s.people[k]
	delete(s.people, k)
	s.mu.Unlock()
	if p != nil {
		go p.close()
	}
	s.log.Info("erased person's inbox purged", "tenant", tenant)
	return nil
}
