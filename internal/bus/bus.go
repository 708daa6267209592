package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// Header names set on every event message besides Nats-Msg-Id, so tools and
// consumers can route and filter without decoding protobuf.
const (
	HeaderEventType    = "Alp-Event-Type"
	HeaderEventID      = "Alp-Event-Id"
	HeaderProducerRole = "Alp-Producer-Role"
	HeaderTenant       = "Alp-Tenant"
)

// Options configure a Bus.
type Options struct {
	// Namespace prefixes the broker's stream, bucket and consumer names so that
	// several brokers can share one NATS without seeing each other's state.
	Namespace string
	// Replicas for streams and buckets (1 embedded, 3 on a cluster).
	Replicas int
	// Duplicates is the JetStream dedupe window of event streams; a
	// consumer marks a delivery of an event older than half of it as a
	// possible repeat (Delivery.Repeat).
	Duplicates time.Duration
	// MaxDeliver and AckWait are the defaults for consumers.
	MaxDeliver int
	AckWait    time.Duration
	// DeadLetterMaxAge bounds the dead-letter stream (0: 30 days).
	DeadLetterMaxAge time.Duration
	// CheckProducer, when set, is asked by every consumer whether the event
	// on subject may come from the producer role it names. A refused event
	// is dead-lettered and counted (alpd_bus_forbidden_producer_total): in
	// split mode a compromised service must not be able to forge another
	// role's events.
	CheckProducer func(subject string, ev *alpv1.Event) error
	Logger        *slog.Logger
	Registerer    prometheus.Registerer
}

func (o *Options) complete() error {
	if o.Namespace == "" {
		return errors.New("bus: namespace is required")
	}
	if err := CheckToken(o.Namespace); err != nil {
		return fmt.Errorf("bus: namespace %q: %w", o.Namespace, err)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Duplicates == 0 {
		o.Duplicates = 2 * time.Minute
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = 5
	}
	if o.AckWait == 0 {
		o.AckWait = 30 * time.Second
	}
	if o.DeadLetterMaxAge == 0 {
		o.DeadLetterMaxAge = 30 * 24 * time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	return nil
}

// Bus publishes and consumes alp events on one NATS connection.
type Bus struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	opts    Options
	log     *slog.Logger
	metrics *metrics
}

// New wraps an established NATS connection. It does not create anything on
// the server: streams are made by their owners with EnsureStream, and the
// shared dead-letter stream with EnsureShared.
func New(nc *nats.Conn, opts Options) (*Bus, error) {
	if nc == nil {
		return nil, errors.New("bus: nil NATS connection")
	}
	if err := opts.complete(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Bus{nc: nc, js: js, opts: opts, log: opts.Logger, metrics: m}, nil
}

// JetStream exposes the underlying context for packages that need a KV
// bucket or a read the bus does not wrap.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Conn is the NATS connection the bus uses.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Namespace is the broker namespace of this bus.
func (b *Bus) Namespace() string { return b.opts.Namespace }

// Options returns the completed options.
func (b *Bus) Options() Options { return b.opts }

// StreamName names a stream of this broker.
func (b *Bus) StreamName(name string) string { return StreamName(b.opts.Namespace, name) }

// StreamSpec is a stream as its owning service declares it.
type StreamSpec struct {
	// Name without namespace, e.g. "send"; the stream is NS_SEND.
	Name     string
	Subjects []string
	// Retention: LimitsPolicy for event logs, WorkQueuePolicy for work queues.
	Retention jetstream.RetentionPolicy
	MaxAge    time.Duration
	// Append-only streams (the ledger) deny deletes and purges.
	DenyDelete bool
	DenyPurge  bool
	// Sources (stream name without namespace → subject filter) feed a work
	// queue from event logs owned by other services.
	Sources map[string]string
	// Transforms (source stream name → destination) rewrite a source's
	// subjects as they enter the queue: the source's filter is the
	// transform's source pattern (a NATS subject transform), e.g. to append
	// a partition token.
	Transforms map[string]string
	// Description says what the stream holds; it is shown by nats stream info.
	Description string
}

// SourceStart is where a work queue's source starts when it has sourced
// nothing yet: the origin's first message. Without it nats-server starts
// a source set up after the queue consumed anything (FirstSeq > 1) at the
// queue's last message time, so events published while the source was
// still being set up would never reach the queue.
const SourceStart = 1

// Config renders the spec into a jetstream configuration for this bus.
func (b *Bus) Config(spec StreamSpec) jetstream.StreamConfig {
	cfg := jetstream.StreamConfig{
		Name:        b.StreamName(spec.Name),
		Description: spec.Description,
		Subjects:    spec.Subjects,
		Retention:   spec.Retention,
		MaxAge:      spec.MaxAge,
		Storage:     jetstream.FileStorage,
		Replicas:    b.opts.Replicas,
		Duplicates:  b.opts.Duplicates,
		DenyDelete:  spec.DenyDelete,
		DenyPurge:   spec.DenyPurge,
		AllowDirect: true,
	}
	if spec.MaxAge > 0 && cfg.Duplicates > spec.MaxAge {
		cfg.Duplicates = spec.MaxAge
	}
	for name, filter := range spec.Sources {
		src := &jetstream.StreamSource{Name: b.StreamName(name), OptStartSeq: SourceStart}
		if dest, ok := spec.Transforms[name]; ok {
			// NATS takes a filter or transforms on a source, not both: the
			// transform's source pattern filters.
			src.SubjectTransforms = []jetstream.SubjectTransformConfig{{Source: filter, Destination: dest}}
		} else {
			src.FilterSubject = filter
		}
		cfg.Sources = append(cfg.Sources, src)
	}
	sortSources(cfg.Sources)
	return cfg
}

// SourceFilter is the subjects src takes from its stream: its filter, or
// the source pattern of its transform.
func SourceFilter(src *jetstream.StreamSource) string {
	if len(src.SubjectTransforms) > 0 {
		return src.SubjectTransforms[0].Source
	}
	return src.FilterSubject
}

// EnsureStream creates the stream or brings its configuration up to the
// spec. It is called by the owning service at start-up and by supervised
// consumers when the stream has vanished (a NATS store wiped under us).
func (b *Bus) EnsureStream(ctx context.Context, spec StreamSpec) (jetstream.Stream, error) {
	return b.EnsureStreamConfig(ctx, b.Config(spec))
}

// EnsureStreamConfig is EnsureStream for a configuration a spec cannot
// say (the ledger's atomic batches), usually b.Config(spec) with a few
// fields added.
func (b *Bus) EnsureStreamConfig(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := b.js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = b.js.CreateStream(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("bus: create stream %s: %w", cfg.Name, err)
		}
		b.log.Info("stream created", "stream", cfg.Name, "retention", cfg.Retention.String(), "max_age", cfg.MaxAge.String())
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("bus: look up stream %s: %w", cfg.Name, err)
	}
	if sameStreamConfig(s.CachedInfo().Config, cfg) {
		return s, nil
	}
	s, err = b.js.UpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bus: update stream %s: %w", cfg.Name, err)
	}
	b.log.Info("stream updated", "stream", cfg.Name)
	return s, nil
}

// sameStreamConfig compares the fields a spec controls; the server fills in
// others (limits, compression, metadata) that we must not fight over.
func sameStreamConfig(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description &&
		reflect.DeepEqual(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention &&
		have.MaxAge == want.MaxAge &&
		have.Replicas == want.Replicas &&
		have.Duplicates == want.Duplicates &&
		have.DenyDelete == want.DenyDelete &&
		have.DenyPurge == want.DenyPurge &&
		have.AllowAtomicPublish == want.AllowAtomicPublish &&
		sameSources(have.Sources, want.Sources)
}

func sameSources(a, b []*jetstream.StreamSource) bool {
	if len(a) != len(b) {
		return false
	}
	sortSources(a)
	for i := range a {
		if a[i].Name != b[i].Name || a[i].FilterSubject != b[i].FilterSubject ||
			!slices.Equal(a[i].SubjectTransforms, b[i].SubjectTransforms) {
			return false
		}
	}
	return true
}

func sortSources(s []*jetstream.StreamSource) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Name < s[j-1].Name; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Kind is the name of the body set in ev (e.g. "send_requested"), or "" when
// none or an unknown one is set.
func Kind(ev *alpv1.Event) string {
	m := ev.ProtoReflect()
	od := m.Descriptor().Oneofs().ByName("body")
	if fd := m.WhichOneof(od); fd != nil {
		return string(fd.Name())
	}
	return ""
}

// SourceID is the id of the event that caused ev, or ev's own id when it came
// from outside (a command). A re-run of the same cause yields the same source.
func SourceID(ev *alpv1.Event) string {
	if c := ev.GetHeader().GetCausationId(); c != "" {
		return c
	}
	return ev.GetHeader().GetEventId()
}

// MsgID is the Nats-Msg-Id of ev: hash(source event id, kind).
func MsgID(ev *alpv1.Event) string {
	return MsgIDFor(SourceID(ev), Kind(ev))
}

// MsgIDFor is the Nats-Msg-Id of the kind of event a source event causes.
func MsgIDFor(sourceID, kind string) string { return HashID(sourceID, kind) }

// HashID is a short stable id of parts (the first 16 bytes of SHA-256 over
// the NUL-terminated parts, in hex): Msg-Ids and ids derived from what a
// command is about.
func HashID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// ErrInvalidEvent is returned for an event without header, id, tenant or body.
var ErrInvalidEvent = errors.New("bus: invalid event")

// NewMsg renders ev for subject with the headers every publish carries
// (Nats-Msg-Id, event type and id, producer role, tenant), after checking
// the subject (CheckSubject) and that the event is complete. Writers that publish themselves (the
// ledger's atomic batches) use it too.
func NewMsg(subject string, ev *alpv1.Event) (*nats.Msg, error) {
	if err := CheckSubject(subject); err != nil {
		return nil, err
	}
	h := ev.GetHeader()
	kind := Kind(ev)
	switch {
	case h == nil:
		return nil, fmt.Errorf("%w: no header", ErrInvalidEvent)
	case h.GetEventId() == "":
		return nil, fmt.Errorf("%w: no event id", ErrInvalidEvent)
	case h.GetTenant() == "":
		return nil, fmt.Errorf("%w: no tenant", ErrInvalidEvent)
	case kind == "":
		return nil, fmt.Errorf("%w: no body", ErrInvalidEvent)
	case h.GetType() != kind:
		return nil, fmt.Errorf("%w: header type %q but body %q", ErrInvalidEvent, h.GetType(), kind)
	}
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("bus: marshal event: %w", err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, MsgID(ev))
	msg.Header.Set(HeaderEventType, kind)
	msg.Header.Set(HeaderEventID, h.GetEventId())
	msg.Header.Set(HeaderProducerRole, h.GetProducerRole().String())
	msg.Header.Set(HeaderTenant, h.GetTenant())
	return msg, nil
}

// Publish stores ev on subject. A publish of the same (source, kind) inside
// the dedupe window stores nothing and reports the first sequence.
func (b *Bus) Publish(ctx context.Context, subject string, ev *alpv1.Event) (*jetstream.PubAck, error) {
	msg, err := NewMsg(subject, ev)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ack, err := b.js.PublishMsg(ctx, msg)
	b.metrics.publishSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		b.metrics.publishFailures.Inc()
		return nil, fmt.Errorf("bus: publish %s on %s: %w", Kind(ev), subject, err)
	}
	if ack.Duplicate {
		b.metrics.publishDuplicates.Inc()
	}
	return ack, nil
}

// ErrConflict means another writer appended to the subject first: reload
// the aggregate and decide again.
var ErrConflict = errors.New("bus: append conflict")

// Append stores ev on subject only if the last message on that subject has
// sequence expected (0: the subject must be empty). It returns the stream
// sequence of ev. A retry of an append that the server already stored (the
// first attempt's ack was lost) returns that sequence, not a conflict.
func (b *Bus) Append(ctx context.Context, subject string, expected uint64, ev *alpv1.Event) (uint64, error) {
	msg, err := NewMsg(subject, ev)
	if err != nil {
		return 0, err
	}
	ack, err := b.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(expected))
	if err == nil {
		return ack.Sequence, nil
	}
	if !IsWrongLastSequence(err) {
		return 0, fmt.Errorf("bus: append %s on %s: %w", Kind(ev), subject, err)
	}
	// The server answers a retry of a stored append with a conflict (the
	// expectation is checked before dedupe), so look at what is last.
	last, lerr := b.LastMessage(ctx, subject)
	if lerr != nil {
		return 0, fmt.Errorf("bus: append %s on %s: conflict, and reading the last message failed: %w", Kind(ev), subject, lerr)
	}
	if last != nil && last.Header.Get(jetstream.MsgIDHeader) == msg.Header.Get(jetstream.MsgIDHeader) {
		return last.Sequence, nil
	}
	b.metrics.appendConflicts.Inc()
	return 0, fmt.Errorf("%w: %s expected last sequence %d: %v", ErrConflict, subject, expected, err)
}

// LastSequence is the sequence of the last message on subject in stream, 0
// when the subject is empty: the version to pass to Append.
func (b *Bus) LastSequence(ctx context.Context, subject string) (uint64, error) {
	m, err := b.LastMessage(ctx, subject)
	if err != nil || m == nil {
		return 0, err
	}
	return m.Sequence, nil
}

// LastMessage is the last message stored on subject, nil when there is none.
func (b *Bus) LastMessage(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	if err := CheckSubject(subject); err != nil {
		return nil, err
	}
	name, err := b.js.StreamNameBySubject(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("bus: stream for %s: %w", subject, err)
	}
	s, err := b.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("bus: stream %s: %w", name, err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bus: last message on %s: %w", subject, err)
	}
	return m, nil
}

// LastMessageIn is LastMessage for a subject of a known stream (name
// without namespace): one direct get, $JS.API.DIRECT.GET.<stream>.<subject>,
// and nothing else. A role that only awaits answers on a stream it does
// not own (ingress on policy's decisions) may do exactly that on NATS, not
// look the stream up (docs/nats-permissions.md); every stream the bus
// makes allows direct gets (Config). A stream that does not exist is
// jetstream.ErrStreamNotFound.
func (b *Bus) LastMessageIn(ctx context.Context, stream, subject string) (*jetstream.RawStreamMsg, error) {
	// The subject goes into the request subject: checked here, whoever
	// built it.
	if err := CheckSubject(subject); err != nil {
		return nil, err
	}
	name := b.StreamName(stream)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.js.Options().DefaultTimeout)
		defer cancel()
	}
	reply, err := b.nc.RequestWithContext(ctx, jetstream.DefaultAPIPrefix+"DIRECT.GET."+name+"."+subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		// No server answers direct gets for the stream: it is not there.
		return nil, fmt.Errorf("bus: stream %s: %w", name, jetstream.ErrStreamNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: last message on %s: %w", subject, err)
	}
	m, err := directGetReply(reply)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bus: last message on %s: %w", subject, err)
	}
	return m, nil
}

// directGetReply reads a direct get's answer: the message with its
// stream, subject, sequence and time in headers, or a status without
// data (404: no message).
func directGetReply(r *nats.Msg) (*jetstream.RawStreamMsg, error) {
	if status := r.Header.Get("Status"); status != "" && len(r.Data) == 0 {
		if status == "404" {
			return nil, jetstream.ErrMsgNotFound
		}
		return nil, fmt.Errorf("direct get answered %s %s", status, r.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(r.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get answer without a valid %s header: %w", jetstream.SequenceHeader, err)
	}
	tm, err := time.Parse(time.RFC3339Nano, r.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("direct get answer without a valid %s header: %w", jetstream.TimeStampHeaer, err)
	}
	subj := r.Header.Get(jetstream.SubjectHeader)
	if subj == "" {
		return nil, fmt.Errorf("direct get answer without a %s header", jetstream.SubjectHeader)
	}
	return &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: r.Header, Data: r.Data, Time: tm}, nil
}

// IsWrongLastSequence reports whether err is JetStream's expected-sequence
// conflict: 10071 on R1 streams, 10164 on replicated ones.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// Decode parses an event from a message body.
func Decode(data []byte) (*alpv1.Event, error) {
	ev := &alpv1.Event{}
	if err := proto.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("bus: decode event: %w", err)
	}
	return ev, nil
}
