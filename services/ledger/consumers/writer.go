package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/prometheus/client_golang/prometheus"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/services/ledger/secrets"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// Writer turns work-queue events into ledger entries.
type Writer struct {
	Store   *jsstore.Store
	Secrets *secrets.Store
	// Sealer opens the envelope bodies (the data-key bucket).
	Sealer  *seal.Sealer
	Tenants alp.Tenants
	Logger  *slog.Logger

	uncommitted *prometheus.CounterVec
	erasures    prometheus.Counter
}

// Register adds the writer's metrics to reg.
func (w *Writer) Register(reg prometheus.Registerer) error {
	w.uncommitted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "alpd_ledger_entries_without_commitment_total",
		Help: "Entries appended without a commitment, by reason (body_erased: the body's data key was destroyed first; ledger_secret_erased; unreadable: the body did not open or has no digest).",
	}, []string{"reason"})
	w.erasures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "alpd_ledger_secrets_erased_total", Help: "Persons' ledger secrets erased after their data key was destroyed.",
	})
	for _, c := range []prometheus.Collector{w.uncommitted, w.erasures} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("ledger: register metrics: %w", err)
		}
	}
	return nil
}

// Handle is the bus handler of every ledger partition consumer.
func (w *Writer) Handle(ctx context.Context, d bus.Delivery) error {
	switch body := d.Event.GetBody().(type) {
	case *alpv1.Event_SendRequested:
		return w.sendRequested(ctx, d, body.SendRequested)
	case *alpv1.Event_DataKeyDestroyed:
		return w.erase(ctx, d.Event, body.DataKeyDestroyed)
	default:
		return bus.Permanent(fmt.Errorf("ledger: cannot handle %s", bus.Kind(d.Event)))
	}
}

// sendRequested appends the sender's envelope.send_requested entry.
func (w *Writer) sendRequested(ctx context.Context, d bus.Delivery, req *alpv1.SendRequested) error {
	ev := d.Event
	tenant, person, env := ev.GetHeader().GetTenant(), req.GetSenderPersonId(), req.GetEnvelope()
	switch {
	case !w.Tenants.Hosts(tenant):
		return bus.Permanent(fmt.Errorf("ledger: send request for unhosted tenant %q", tenant))
	case env.GetId() == "":
		return bus.Permanent(errors.New("ledger: send request without envelope id"))
	case alp.ValidatePersonID(person) != nil:
		return bus.Permanent(fmt.Errorf("ledger: send request with sender person id %q", person))
	}
	occurred := time.Now()
	if o := ev.GetHeader().GetOccurred(); o != nil {
		occurred = o.AsTime()
	}
	digest, reason, err := w.digest(ctx, env, occurred)
	if err != nil {
		return err
	}
	var sec *secrets.Secret
	if digest != nil {
		sec, err = w.Secrets.Get(ctx, tenant, person, true)
		switch {
		case errors.Is(err, secrets.ErrErased):
			digest, reason = nil, "ledger_secret_erased"
		case err != nil:
			return err
		}
	}
	if digest == nil {
		w.uncommitted.WithLabelValues(reason).Inc()
		w.Logger.Info("ledger entry without commitment", "tenant", tenant, "envelope_id", env.GetId(), "reason", reason)
	}
	entry := ledgerlog.Entry{
		V: ledgerlog.EntryVersion, Log: ledgerlog.Origin(tenant, person), Kind: ledgerlog.KindSendRequested,
		SourceEvent: ev.GetHeader().GetEventId(), EnvelopeID: env.GetId(), Counterparty: Counterparty(env.GetTo()),
		Time: ledgerlog.FormatTime(occurred),
	}
	r := jsstore.Request{
		Tenant: tenant, Person: person, SourceID: ev.GetHeader().GetEventId(), Correlation: env.GetId(),
		Build: func(index uint64) ([]byte, []byte, error) {
			e := entry
			e.Index = index
			var opening []byte
			if digest != nil {
				e.Commitment = ledgerlog.Commit(sec.Salt(env.GetId(), index), *digest)
				opening = sec.SealOpening(env.GetId(), index, digest[:])
			}
			leaf, err := e.Canonical()
			if err != nil {
				return nil, nil, bus.Permanent(err)
			}
			return leaf, opening, nil
		},
	}
	// A possible repeat beyond the dedupe window: look for the source's
	// leaf in the log before appending one.
	if d.Repeat {
		r.Since = occurred
	}
	_, err = w.Store.Append(ctx, r)
	return err
}

// digest opens the envelope's body and computes the envelope digest. A
// body that can never be read (data key destroyed or missing, ciphertext
// that does not authenticate) or that has no digest gives no commitment
// and a reason; other failures are returned, to be retried.
func (w *Writer) digest(ctx context.Context, env *alpv1.Envelope, occurred time.Time) (*[32]byte, string, error) {
	body, err := w.Sealer.Open(ctx, env.GetSealedBody(), []byte(env.GetId()))
	switch {
	case errors.Is(err, seal.ErrKeyDestroyed), errors.Is(err, seal.ErrNoDataKey):
		return nil, "body_erased", nil
	case errors.Is(err, seal.ErrOpenFailed), errors.Is(err, seal.ErrMalformed),
		errors.Is(err, alp.ErrInvalidPersonID), errors.Is(err, alp.ErrInvalidTenant):
		w.Logger.Error("ledger: envelope body does not open; recording the envelope without a commitment",
			"envelope_id", env.GetId(), "err", err)
		return nil, "unreadable", nil
	case err != nil:
		return nil, "", fmt.Errorf("ledger: open body of %s: %w", env.GetId(), err)
	}
	defer clear(body)
	canon, err := jcs.Transform(body)
	if err != nil {
		return nil, "unreadable", nil
	}
	f := ledgerlog.EnvelopeFields{ID: env.GetId(), From: env.GetFrom(), To: env.GetTo(), Type: env.GetType(),
		Body: canon, InReplyTo: env.GetInReplyTo(), Created: occurred}
	// The envelope's own creation time, when ingress set it, is what the
	// counterparty sees too; the event's time stands in otherwise.
	if c := env.GetCreated(); c != nil {
		f.Created = c.AsTime()
	}
	if e := env.GetExpires(); e != nil {
		f.Expires = e.AsTime()
	}
	d, err := ledgerlog.EnvelopeDigest(f)
	if err != nil {
		w.Logger.Warn("ledger: no envelope digest; recording the envelope without a commitment", "envelope_id", env.GetId(), "err", err)
		return nil, "unreadable", nil
	}
	return &d, "", nil
}

// Counterparty is what a leaf says about the other side of an envelope:
// the domain of the recipient's address, lowercased. Never the address
// itself: a leaf can never be erased, and an address is personal data; the
// domain names the other organisation (and its broker), which is what a
// match of two ledgers needs to know where to look, and the envelope id
// does the rest. The full address is in the digest the commitment hides.
// The counterparty's log origin enters the ledger with their receipt.
func Counterparty(to string) string {
	_, domain, ok := strings.Cut(to, "@")
	if !ok {
		return ""
	}
	d, err := alp.ParseTenant(strings.TrimSpace(domain))
	if err != nil {
		return ""
	}
	return string(d)
}

// erase destroys the person's ledger secret after identity destroyed their
// data key: their openings become unreadable, their log stays verifiable.
func (w *Writer) erase(ctx context.Context, ev *alpv1.Event, d *alpv1.DataKeyDestroyed) error {
	tenant, person := d.GetTenant(), d.GetPersonId()
	if tenant != ev.GetHeader().GetTenant() || !w.Tenants.Hosts(tenant) {
		return bus.Permanent(fmt.Errorf("ledger: erasure for tenant %q in an event of %q", tenant, ev.GetHeader().GetTenant()))
	}
	if err := w.Secrets.Erase(ctx, tenant, person); err != nil {
		if errors.Is(err, alp.ErrInvalidPersonID) || errors.Is(err, alp.ErrInvalidTenant) {
			return bus.Permanent(err)
		}
		return err
	}
	w.erasures.Inc()
	w.Logger.Info("ledger secret erased", "tenant", tenant)
	return nil
}
