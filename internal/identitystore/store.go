package identitystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/personmap"
	"github.com/alpd-project/alpd/internal/streams"
)

// Reader tuning.
const (
	// fetchWait is how long one pull waits for messages; a pull the server
	// ends empty-handed confirms freshness, so it is also the polling
	// period of Fresh.
	fetchWait = time.Second
	// maxSilentPulls: after that many pulls in a row without an answer
	// the reader is replaced.
	maxSilentPulls = 3
	// fetchBatch bounds the messages of one pull.
	fetchBatch = 256
	// inactiveThreshold: the server deletes a reader's consumer this long
	// after its last pull (readers may not delete consumers themselves).
	inactiveThreshold = 30 * time.Second
	maxBackoff        = 2 * time.Second
	// maxAttempts bounds a command's decide–append rounds on conflicts.
	maxAttempts = 5
)

// Store is a replica of the identity state of some tenants, following the
// identity stream. It is safe for concurrent use.
type Store struct {
	b       *bus.Bus
	people  *personmap.Map
	log     *slog.Logger
	stream  string
	filters []string
	tenants map[string]*tenantState // by tenant domain
	// versions: last stream sequence of every subject read, for appends.
	versions map[string]uint64

	mu        sync.RWMutex // guards tenants' contents, versions, applied, advanced
	applied   uint64       // stream sequence of the last message applied
	advanced  chan struct{}
	confirmMu sync.Mutex
	confirmed time.Time // last time everything the stream held was applied
	caughtUp  chan struct{}
	caughtUpO sync.Once

	// beforeCommit, in tests, runs before each append (to make another
	// writer win a race).
	beforeCommit func(subject string)

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// Open builds the projection of tenants' identity state from the identity
// stream of b's broker and keeps following it until Close, and opens the
// person map (the bucket <NS>_PERSONMAP, created if missing) whose records
// ks's DATA keys wrap. The stream must exist (the identity service creates
// it). Open returns once the projection has caught up with the stream, or
// with ctx's error.
func Open(ctx context.Context, b *bus.Bus, ks keystore.KeyStore, tenants []string, log *slog.Logger) (*Store, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: bus: nil", ErrInvalid)
	}
	if ks == nil {
		return nil, fmt.Errorf("%w: key store: nil", ErrInvalid)
	}
	if len(tenants) == 0 {
		return nil, fmt.Errorf("%w: tenants: at least one is required", ErrInvalid)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		b:        b,
		log:      log.With("component", "identitystore"),
		stream:   b.StreamName(streams.Identity),
		tenants:  map[string]*tenantState{},
		versions: map[string]uint64{},
		advanced: make(chan struct{}),
		caughtUp: make(chan struct{}),
		done:     make(chan struct{}),
		closed:   make(chan struct{}),
	}
	for _, t := range tenants {
		if err := alp.ValidateTenant(t); err != nil {
			return nil, fmt.Errorf("%w: tenants: %v", ErrInvalid, err)
		}
		if s.tenants[t] != nil {
			return nil, fmt.Errorf("%w: tenants: %q listed twice", ErrInvalid, t)
		}
		s.tenants[t] = newTenantState(t)
		s.filters = append(s.filters, streams.TenantFilter(streams.Identity, t))
	}
	people, err := personmap.Open(ctx, b.JetStream(), b.StreamName(natsauth.PersonMapBucket), b.Options().Replicas, ks, personmap.Options{})
	if err != nil {
		return nil, fmt.Errorf("identitystore: %w", err)
	}
	s.people = people
	cons, err := s.newReader(ctx)
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.follow(fctx, cons)
	select {
	case <-s.caughtUp:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("identitystore: catching up with %s: %w", s.stream, ctx.Err())
	}
}

// Close stops following the stream. Queries keep answering from the last
// state, Fresh fails and commands return ErrClosed.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.cancel()
		<-s.done
	})
}

// Applied is the stream sequence of the last event applied.
func (s *Store) Applied() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// Fresh returns nil only if, within maxStaleness, the store confirmed that
// it had applied every event the stream held for its tenants. Ingress
// refuses tokens when it is not (fail closed). A healthy idle store
// confirms about every second, dating each confirmation from when its pull
// was sent, so its confirmations are up to about 2s old: maxStaleness
// should be a few seconds or more (accesstoken's default is a minute).
// (accesstoken.RevocationChecker)
func (s *Store) Fresh(maxStaleness time.Duration) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	s.confirmMu.Lock()
	c := s.confirmed
	s.confirmMu.Unlock()
	if c.IsZero() {
		return fmt.Errorf("%w: never caught up with %s", ErrStale, s.stream)
	}
	if age := time.Since(c); age > maxStaleness {
		return fmt.Errorf("%w: last caught up with %s %v ago (at most %v allowed)", ErrStale, s.stream, age.Round(time.Millisecond), maxStaleness)
	}
	return nil
}

// confirm records that at time at every event of the stream was applied.
func (s *Store) confirm(at time.Time) {
	s.confirmMu.Lock()
	if at.After(s.confirmed) {
		s.confirmed = at
	}
	s.confirmMu.Unlock()
	s.caughtUpO.Do(func() { close(s.caughtUp) })
}

// waitApplied waits until the projection has applied sequence seq.
func (s *Store) waitApplied(ctx context.Context, seq uint64) error {
	for {
		s.mu.RLock()
		applied, ch := s.applied, s.advanced
		s.mu.RUnlock()
		if applied >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-s.closed:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("identitystore: waiting for the projection to reach sequence %d (at %d): %w", seq, applied, ctx.Err())
		}
	}
}

// newReader creates an ephemeral, in-memory, ack-less consumer of the hosted
// tenants' subjects starting after the last applied sequence. It uses the
// API's ephemeral form (no consumer name in the subject), which is all a
// reader's NATS user may create.
func (s *Store) newReader(ctx context.Context) (jetstream.Consumer, error) {
	s.mu.RLock()
	start := s.applied + 1
	s.mu.RUnlock()
	cfg := jetstream.ConsumerConfig{
		Name:              s.b.StreamName("idstore_" + randomHex()),
		Description:       "identitystore projection reader (ephemeral, ordered)",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubjects:    s.filters,
		InactiveThreshold: inactiveThreshold,
		MemoryStorage:     true,
		Replicas:          1,
	}
	req, err := json.Marshal(struct {
		Stream string                   `json:"stream_name"`
		Config jetstream.ConsumerConfig `json:"config"`
		Action string                   `json:"action"`
	}{s.stream, cfg, "create"})
	if err != nil {
		return nil, fmt.Errorf("identitystore: reader request: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := s.b.Conn().RequestWithContext(rctx, "$JS.API.CONSUMER.CREATE."+s.stream, req)
	if err != nil {
		return nil, fmt.Errorf("identitystore: create reader on %s: %w", s.stream, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Name  string              `json:"name"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("identitystore: create reader on %s: %w", s.stream, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return nil, fmt.Errorf("identitystore: stream %s does not exist (the identity service creates it): %w", s.stream, jetstream.ErrStreamNotFound)
		}
		return nil, fmt.Errorf("identitystore: create reader on %s: %w", s.stream, resp.Error)
	}
	cons, err := s.b.JetStream().Consumer(rctx, s.stream, resp.Name)
	if err != nil {
		return nil, fmt.Errorf("identitystore: reader %s: %w", resp.Name, err)
	}
	return cons, nil
}

// errGap: a delivery was skipped; the reader starts over after the last
// applied event.
var errGap = errors.New("identitystore: delivery gap")

// follow reads until the store is closed, replacing the reader after any
// failure.
func (s *Store) follow(ctx context.Context, cons jetstream.Consumer) {
	defer close(s.done)
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	for {
		if cons != nil {
			before, started := s.Applied(), time.Now()
			err := s.read(ctx, cons)
			if ctx.Err() != nil {
				return
			}
			// A reader that worked for a while starts over quickly; one
			// that keeps failing at once backs off (each leaves a consumer
			// behind until the server's inactivity threshold).
			if s.Applied() > before || time.Since(started) > 10*time.Second {
				backoff = minBackoff
			}
			s.log.Debug("identity stream reader restarting", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		var err error
		if cons, err = s.newReader(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("identity stream reader not restored yet", "stream", s.stream, "err", err)
		}
	}
}

// read applies what cons delivers until a pull fails, the server stops
// answering or a gap shows.
//
// Each pull waits at most fetchWait, of which nats.go gives the server 90%
// as the pull's expiry and keeps the rest to hear the server's answer. A
// pull that the server ends by expiry (status 408, which arrives after every
// message it delivered) confirms freshness as of when the pull was sent:
// whatever the stream held then was delivered as soon as the server got
// the pull. (Not as of the expiry: a message stored just before it may
// still be on its way through the consumer when the server expires the
// pull.) A pull the client gives up on proves nothing; it may also have
// lost a delivery, which the next one shows as a gap.
func (s *Store) read(ctx context.Context, cons jetstream.Consumer) error {
	var delivered uint64 // consumer sequence of the last delivery
	silent := 0          // pulls in a row the server did not answer
	for {
		start := time.Now()
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		batch, err := cons.Fetch(fetchBatch, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				cancel()
				return err
			}
			if md.Sequence.Consumer != delivered+1 {
				cancel()
				return fmt.Errorf("%w: delivery %d after %d", errGap, md.Sequence.Consumer, delivered)
			}
			delivered = md.Sequence.Consumer
			s.applyMsg(msg.Subject(), md.Sequence.Stream, msg.Data())
			if md.NumPending == 0 {
				s.confirm(start)
			}
		}
		err = batch.Error()
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if silent++; silent >= maxSilentPulls {
				return fmt.Errorf("identitystore: %d pulls in a row unanswered: %w", silent, err)
			}
			continue
		case err != nil:
			return err
		}
		silent = 0
		if n < fetchBatch {
			s.confirm(start)
		}
	}
}

// applyMsg decodes and applies one message and advances the applied
// sequence, whether or not the event was usable: a bad event is logged and
// skipped, never retried forever.
func (s *Store) applyMsg(subject string, seq uint64, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.applied {
		return
	}
	// The subject's version is its last sequence, whatever the event: an
	// append must name it even after an event this store refused.
	s.versions[subject] = seq
	if ev, err := bus.Decode(data); err != nil {
		s.log.Error("undecodable identity event skipped", "subject", subject, "seq", seq, "err", err)
	} else if err := s.apply(subject, ev); err != nil {
		s.log.Error("identity event skipped", "subject", subject, "seq", seq, "kind", bus.Kind(ev), "err", err)
	}
	s.applied = seq
	close(s.advanced)
	s.advanced = make(chan struct{})
}
