// Package projection follows an event-sourced stream of the table
// (internal/streams) into a replica's memory: the reader every replica of
// a role runs to keep its projection of the role's state fresh, and the
// freshness its readiness reports.
//
// [Open] reads the stream's subjects from the start and keeps following
// them with an ordered reader: an ephemeral, in-memory, ack-less consumer
// whose deliveries are checked to be contiguous. Any failure (NATS
// restarted, consumer gone, a gap) makes it create a new one starting after
// the last applied sequence, with backoff, until Close. The consumer is
// created through the JetStream API's ephemeral form
// ($JS.API.CONSUMER.CREATE.<stream>, no name in the subject), all that a
// role reading a projection may create (internal/natsauth's Reads).
//
// Every message is handed, decoded, to the owner's apply function under
// the follower's write lock, in stream order; the owner reads its state
// under RLock. The follower also remembers each subject's last sequence
// ([Follower.Version]), the expectation of an optimistic append
// (bus.Append), so two replicas can never fork an aggregate.
//
// # Freshness
//
// [Follower.Fresh] returns nil only if the reader confirmed within the
// given staleness that it had applied everything the stream held on its
// subjects: the reader pulls with a short expiry (about a second), and a
// pull that the server ends for lack of messages, or a message delivered
// with nothing pending after it, confirms that as of the time the pull was
// sent. When NATS goes away no pull is answered, so Fresh starts failing
// once the staleness passes, and recovers when the reader is back.
// Confirmations of a healthy follower are up to about 2s old: allow a few
// seconds.
package projection

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
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
	fetchBatch     = 256
	// inactiveThreshold: the server deletes a reader's consumer this long
	// after its last pull (readers may not delete consumers themselves).
	inactiveThreshold = 30 * time.Second
	minBackoff        = 100 * time.Millisecond
	maxBackoff        = 2 * time.Second
)

// Errors.
var (
	// ErrStale: the projection may be missing recent events.
	ErrStale = errors.New("projection: stale")
	// ErrClosed: the follower was closed.
	ErrClosed = errors.New("projection: closed")
)

// ApplyFunc applies one event to the owner's state. It runs under the
// follower's write lock, in stream order, once per message; an error is
// logged and the event skipped (never retried: a bad event must not stop
// the projection). An undecodable message is logged and skipped without
// calling it; the sequence advances either way.
type ApplyFunc func(subject string, seq uint64, ev *alpv1.Event) error

// Config says what to follow.
type Config struct {
	// Stream is the stream's name without namespace (streams.Policy …).
	Stream string
	// Filters are the subjects followed (the hosted tenants' filters).
	Filters []string
	// Apply applies each event.
	Apply ApplyFunc
	// Name prefixes the readers' consumer names (a token).
	Name string
	Log  *slog.Logger
	// ErrStale and ErrClosed, when set, replace this package's errors of
	// the same names in what Fresh and WaitApplied return, so an owner
	// whose API already promises its own sentinels keeps them.
	ErrStale, ErrClosed error
}

// Follower is a running reader of a stream. Safe for concurrent use.
type Follower struct {
	b      *bus.Bus
	cfg    Config
	stream string
	log    *slog.Logger

	mu       sync.RWMutex // guards the owner's state, versions, applied, advanced
	versions map[string]uint64
	applied  uint64
	advanced chan struct{}

	confirmMu sync.Mutex
	confirmed time.Time
	caughtUp  chan struct{}
	caughtUpO sync.Once

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closed    chan struct{}
}

// Open starts following cfg's stream on b's broker and returns once the
// projection has caught up with it, or with ctx's error. The stream must
// exist (its owner creates it).
func Open(ctx context.Context, b *bus.Bus, cfg Config) (*Follower, error) {
	if b == nil || cfg.Apply == nil || cfg.Stream == "" || len(cfg.Filters) == 0 {
		return nil, errors.New("projection: bus, stream, filters and apply are required")
	}
	if cfg.Name == "" {
		cfg.Name = "proj"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ErrStale == nil {
		cfg.ErrStale = ErrStale
	}
	if cfg.ErrClosed == nil {
		cfg.ErrClosed = ErrClosed
	}
	f := &Follower{
		b: b, cfg: cfg, stream: b.StreamName(cfg.Stream),
		log:      cfg.Log.With("component", "projection", "stream", b.StreamName(cfg.Stream)),
		versions: map[string]uint64{},
		advanced: make(chan struct{}),
		caughtUp: make(chan struct{}),
		done:     make(chan struct{}),
		closed:   make(chan struct{}),
	}
	cons, err := f.newReader(ctx)
	if err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.follow(fctx, cons)
	select {
	case <-f.caughtUp:
		return f, nil
	case <-ctx.Done():
		f.Close()
		return nil, fmt.Errorf("projection: catching up with %s: %w", f.stream, ctx.Err())
	}
}

// Close stops following. The owner's state stays as it is; Fresh fails.
func (f *Follower) Close() {
	f.closeOnce.Do(func() {
		close(f.closed)
		f.cancel()
		<-f.done
	})
}

// Closed reports whether Close was called.
func (f *Follower) Closed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

// RLock locks the owner's state for reading (Apply holds the write lock).
func (f *Follower) RLock() { f.mu.RLock() }

// RUnlock undoes RLock.
func (f *Follower) RUnlock() { f.mu.RUnlock() }

// Version is the stream sequence of the last message applied on subject, 0
// for none: the expectation to append on it. Call it under RLock, together
// with the reads a decision rests on.
func (f *Follower) Version(subject string) uint64 { return f.versions[subject] }

// Versions is a copy of every subject's version (see Version), for
// comparing replicas. Call it under RLock.
func (f *Follower) Versions() map[string]uint64 { return maps.Clone(f.versions) }

// Applied is the stream sequence of the last message applied.
func (f *Follower) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Fresh returns nil only if, within maxStaleness, the follower confirmed
// that it had applied every message its subjects held (see the package
// doc); maxStaleness should be a few seconds or more.
func (f *Follower) Fresh(maxStaleness time.Duration) error {
	if f.Closed() {
		return f.cfg.ErrClosed
	}
	f.confirmMu.Lock()
	c := f.confirmed
	f.confirmMu.Unlock()
	if c.IsZero() {
		return fmt.Errorf("%w: never caught up with %s", f.cfg.ErrStale, f.stream)
	}
	if age := time.Since(c); age > maxStaleness {
		return fmt.Errorf("%w: last caught up with %s %v ago (at most %v allowed)", f.cfg.ErrStale, f.stream, age.Round(time.Millisecond), maxStaleness)
	}
	return nil
}

func (f *Follower) confirm(at time.Time) {
	f.confirmMu.Lock()
	if at.After(f.confirmed) {
		f.confirmed = at
	}
	f.confirmMu.Unlock()
	f.caughtUpO.Do(func() { close(f.caughtUp) })
}

// WaitApplied waits until the projection has applied sequence seq: a
// command's read-your-writes, and a decision's reload after a conflict.
func (f *Follower) WaitApplied(ctx context.Context, seq uint64) error {
	for {
		f.mu.RLock()
		applied, ch := f.applied, f.advanced
		f.mu.RUnlock()
		if applied >= seq {
			return nil
		}
		select {
		case <-ch:
		case <-f.closed:
			return f.cfg.ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("projection: waiting for %s to reach sequence %d (at %d): %w", f.stream, seq, applied, ctx.Err())
		}
	}
}

// WaitSubject waits until the projection has the last message stored on
// subject (after an append conflict: the winner's event).
func (f *Follower) WaitSubject(ctx context.Context, subject string) error {
	last, err := f.b.LastSequence(ctx, subject)
	if err != nil {
		return fmt.Errorf("projection: last of %s: %w", subject, err)
	}
	return f.WaitApplied(ctx, last)
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newReader creates an ephemeral, in-memory, ack-less consumer of the
// subjects starting after the last applied sequence, through the API's
// ephemeral form (no consumer name in the subject).
func (f *Follower) newReader(ctx context.Context) (jetstream.Consumer, error) {
	f.mu.RLock()
	start := f.applied + 1
	f.mu.RUnlock()
	cfg := jetstream.ConsumerConfig{
		Name:              f.b.StreamName(f.cfg.Name + "_" + randomHex()),
		Description:       "projection reader (ephemeral, ordered)",
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubjects:    f.cfg.Filters,
		InactiveThreshold: inactiveThreshold,
		MemoryStorage:     true,
		Replicas:          1,
	}
	req, err := json.Marshal(struct {
		Stream string                   `json:"stream_name"`
		Config jetstream.ConsumerConfig `json:"config"`
		Action string                   `json:"action"`
	}{f.stream, cfg, "create"})
	if err != nil {
		return nil, fmt.Errorf("projection: reader request: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := f.b.Conn().RequestWithContext(rctx, jetstream.DefaultAPIPrefix+"CONSUMER.CREATE."+f.stream, req)
	if err != nil {
		return nil, fmt.Errorf("projection: create reader on %s: %w", f.stream, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Name  string              `json:"name"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("projection: create reader on %s: %w", f.stream, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return nil, fmt.Errorf("projection: stream %s does not exist (its owner creates it): %w", f.stream, jetstream.ErrStreamNotFound)
		}
		return nil, fmt.Errorf("projection: create reader on %s: %w", f.stream, resp.Error)
	}
	cons, err := f.b.JetStream().Consumer(rctx, f.stream, resp.Name)
	if err != nil {
		return nil, fmt.Errorf("projection: reader %s: %w", resp.Name, err)
	}
	return cons, nil
}

var errGap = errors.New("projection: delivery gap")

// follow reads until closed, replacing the reader after any failure.
func (f *Follower) follow(ctx context.Context, cons jetstream.Consumer) {
	defer close(f.done)
	backoff := minBackoff
	for {
		if cons != nil {
			before, started := f.Applied(), time.Now()
			err := f.read(ctx, cons)
			if ctx.Err() != nil {
				return
			}
			// A reader that worked for a while starts over quickly; one
			// that keeps failing at once backs off (each leaves a consumer
			// behind until the server's inactivity threshold).
			if f.Applied() > before || time.Since(started) > 10*time.Second {
				backoff = minBackoff
			}
			f.log.Debug("reader restarting", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		var err error
		if cons, err = f.newReader(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			f.log.Warn("reader not restored yet", "err", err)
		}
	}
}

// read applies what cons delivers until a pull fails, the server stops
// answering or a gap shows. A pull the server ends by expiry (status 408,
// after every message it delivered) confirms freshness as of when the
// pull was sent; a pull the client gives up on proves nothing.
func (f *Follower) read(ctx context.Context, cons jetstream.Consumer) error {
	var delivered uint64
	silent := 0
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
			f.applyMsg(msg.Subject(), md.Sequence.Stream, msg.Data())
			if md.NumPending == 0 {
				f.confirm(start)
			}
		}
		err = batch.Error()
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			if silent++; silent >= maxSilentPulls {
				return fmt.Errorf("projection: %d pulls in a row unanswered: %w", silent, err)
			}
			continue
		case err != nil:
			return err
		}
		silent = 0
		if n < fetchBatch {
			f.confirm(start)
		}
	}
}

func (f *Follower) applyMsg(subject string, seq uint64, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq <= f.applied {
		return
	}
	// The subject's version is its last sequence, whatever the event: an
	// append must name it even after an event the owner refused.
	f.versions[subject] = seq
	ev, err := bus.Decode(data)
	if err != nil {
		f.log.Error("undecodable event skipped", "subject", subject, "seq", seq, "err", err)
	} else if err := f.cfg.Apply(subject, seq, ev); err != nil {
		f.log.Error("event skipped", "subject", subject, "seq", seq, "kind", bus.Kind(ev), "err", err)
	}
	f.applied = seq
	close(f.advanced)
	f.advanced = make(chan struct{})
}
