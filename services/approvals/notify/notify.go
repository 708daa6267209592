// Package notify tells people that an approval item waits for them: a
// signed JSON webhook and/or a plain-text email per item (or one digest for
// several), never carrying the held values. Every attempt is recorded as a
// NotificationAttempted on the item's notification subject, which is also
// how a redelivered item finds out that a channel was already notified.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/approvals/api"
	"github.com/alpd-project/alpd/services/approvals/items"
)

// Channels, as NotificationAttempted names them.
const (
	ChannelWebhook = "webhook"
	ChannelEmail   = "email"
)

// gaveUp starts the error of an attempt after which no other is made (the
// receiver is gone, the message cannot be built, MaxAge passed): a
// redelivery reads it as the channel being done with the item.
const gaveUp = "gave up: "

// Deps are what the notifier runs on.
type Deps struct {
	// Bus reads and appends the notification subjects (required).
	Bus    *bus.Bus
	Logger *slog.Logger
	Now    func() time.Time
	// HTTPClient posts webhooks (default: 10s timeout, no redirects).
	HTTPClient *http.Client
	// Address is a person's ALP address (required when email or a
	// per-person webhook is configured).
	Address func(ctx context.Context, tenant, personID string) (string, error)
	// Pending lists a person's items (required with Config.Digest); only
	// the pending ones are read.
	Pending func(ctx context.Context, tenant, personID string) ([]items.Item, error)
}

// Notifier sends the notifications; it is the approvals service's
// Notifier (Handle, TestSend).
type Notifier struct {
	cfg *config
	d   Deps
}

// New checks cfg and builds a notifier.
func New(cfg Config, d Deps) (*Notifier, error) {
	c, err := cfg.check()
	if err != nil {
		return nil, err
	}
	var errs []error
	if d.Bus == nil {
		errs = append(errs, errors.New("notify: no bus"))
	}
	needAddress := c.email != nil || slices.ContainsFunc(c.webhooks, func(w webhook) bool { return w.person != "" })
	if needAddress && d.Address == nil {
		errs = append(errs, errors.New("notify: email or a per-person webhook needs Deps.Address (a person's address)"))
	}
	if c.Digest > 0 && d.Pending == nil {
		errs = append(errs, errors.New("notify: digest needs Deps.Pending (a person's items)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.HTTPClient == nil {
		// A receiver's redirect would move the signed notification to a
		// URL nobody configured.
		d.HTTPClient = &http.Client{Timeout: 10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Notifier{cfg: c, d: d}, nil
}

// target is one channel of one person.
type target struct {
	channel string // ChannelWebhook or ChannelEmail
	// token is the channel's subject token: "email", or "webhook-" and a
	// hash of the URL, so two webhooks of one person keep separate records.
	token string
	addr  string // the URL, or the email address
	hook  *webhook
}

// targets are the channels configured for a person.
func (n *Notifier) targets(ctx context.Context, tenant, personID string) ([]target, error) {
	var (
		address string
		looked  bool
	)
	addressOf := func() (string, error) {
		if looked {
			return address, nil
		}
		a, err := n.d.Address(ctx, tenant, personID)
		if err != nil {
			return "", fmt.Errorf("notify: address of person %s: %w", personID, err)
		}
		pa, err := alp.ParseAddress(a)
		if err != nil {
			return "", fmt.Errorf("notify: address of person %s: %w", personID, err)
		}
		address, looked = pa.String(), true
		return address, nil
	}
	var out []target
	for i := range n.cfg.webhooks {
		w := &n.cfg.webhooks[i]
		if w.Tenant != strings.ToLower(tenant) {
			continue
		}
		if w.person != "" {
			a, err := addressOf()
			if err != nil {
				return nil, err
			}
			if a != w.person {
				continue
			}
		}
		out = append(out, target{channel: ChannelWebhook, token: webhookToken(w.URL), addr: w.URL, hook: w})
	}
	if e := n.cfg.email; e != nil {
		a, err := addressOf()
		if err != nil {
			return nil, err
		}
		to, ok := e.to[a]
		if !ok {
			to = a
		}
		out = append(out, target{channel: ChannelEmail, token: ChannelEmail, addr: to})
	}
	return out, nil
}

// webhookToken is a webhook's subject token: "webhook-" and a hash of its
// URL, so two webhooks of one person keep their own attempts.
func webhookToken(url string) string { return ChannelWebhook + "-" + bus.HashID(url)[:12] }

// item is what a notification tells of one item: nothing held.
type item struct {
	ID, Kind, EnvelopeID, From, Type, BindingCode string
	Created, Expires                              time.Time
}

func itemOfEvent(r *alpv1.ApprovalRequested) item {
	return item{ID: r.GetItemId(), Kind: kindName(r.GetKind()), EnvelopeID: r.GetEnvelopeId(), From: r.GetFrom(),
		Type: r.GetType(), BindingCode: r.GetBindingCode(), Created: r.GetCreated().AsTime(), Expires: r.GetExpires().AsTime()}
}

func itemOf(it items.Item) item {
	return item{ID: it.ID, Kind: string(it.Kind), EnvelopeID: it.EnvelopeID, From: it.From, Type: it.Type,
		BindingCode: it.BindingCode, Created: it.Created, Expires: it.Expires}
}

func kindName(k alpv1.HeldKind) string {
	switch k {
	case alpv1.HeldKind_HELD_KIND_CONNECTION_REQUEST:
		return string(items.ConnectionRequest)
	case alpv1.HeldKind_HELD_KIND_COMMITMENT:
		return string(items.Commitment)
	}
	return string(items.ConfidentialFields)
}

func (n *Notifier) link(itemID string) string { return n.cfg.PublicURL + "/approvals/items/" + itemID }

// pendingOn is one item still to notify on a channel: its subject, the
// sequence of its last attempt (0: none) and the next attempt's number.
type pendingOn struct {
	item    item
	subject string
	seq     uint64
	attempt uint32
}

// Handle notifies the person of an ApprovalRequested on every channel
// configured for them that has not had it yet. A failed channel asks for
// the item again after a backoff (bus.Later) until MaxAge after the item
// was created; quiet hours and the digest wait ask for it when they end.
func (n *Notifier) Handle(ctx context.Context, d bus.Delivery) error {
	req := d.Event.GetApprovalRequested()
	if req == nil {
		return nil
	}
	tenant, personID := d.Event.GetHeader().GetTenant(), req.GetPersonId()
	if req.GetCreated() == nil {
		return bus.Permanent(fmt.Errorf("notify: item %s has no creation time", req.GetItemId()))
	}
	it := itemOfEvent(req)
	decided, err := n.decided(ctx, tenant, personID, it.ID)
	if err != nil {
		return bus.Later(n.cfg.RetryMin, err)
	}
	if decided {
		return nil
	}
	targets, err := n.targets(ctx, tenant, personID)
	if err != nil {
		return bus.Later(n.cfg.RetryMin, err)
	}
	if len(targets) == 0 {
		return nil
	}
	now := n.d.Now()
	if due := it.Created.Add(n.cfg.Digest); n.cfg.Digest > 0 && now.Before(due) {
		return bus.Later(due.Sub(now), fmt.Errorf("notify: item %s waits for the digest at %s", it.ID, due.Format(time.RFC3339)))
	}
	if q := n.cfg.quiet.until(now); q > 0 {
		return bus.Later(q, fmt.Errorf("notify: quiet hours for %s", q.Round(time.Second)))
	}
	deadline := it.Created.Add(n.cfg.MaxAge)
	var (
		retry time.Duration
		errs  []error
	)
	for _, t := range targets {
		batch, err := n.batch(ctx, tenant, personID, it, t)
		if err != nil {
			errs = append(errs, err)
			retry = minRetry(retry, n.cfg.RetryMin)
			continue
		}
		if len(batch) == 0 {
			continue
		}
		sendErr := n.send(ctx, t, tenant, personID, batch)
		final := sendErr == nil || isFinal(sendErr) || !n.d.Now().Before(deadline)
		if recErr := n.record(ctx, d.Event, t, personID, batch, sendErr, final); recErr != nil {
			errs = append(errs, recErr)
			retry = minRetry(retry, n.cfg.RetryMin)
		}
		if sendErr == nil {
			continue
		}
		n.d.Logger.WarnContext(ctx, "notify: notification failed", "tenant", tenant, "person", personID, "item", it.ID,
			"channel", t.channel, "attempt", batch[0].attempt, "final", final, "err", sendErr)
		if !final {
			errs = append(errs, sendErr)
			retry = minRetry(retry, min(n.backoff(batch[0].attempt), deadline.Sub(n.d.Now())))
		}
	}
	if len(errs) > 0 {
		return bus.Later(max(retry, time.Millisecond), errors.Join(errs...))
	}
	return nil
}

func minRetry(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}

// backoff is the wait after the attempt-th failure: RetryMin doubled per
// attempt, at most RetryMax.
func (n *Notifier) backoff(attempt uint32) time.Duration {
	d := n.cfg.RetryMin
	for i := uint32(1); i < attempt && d < n.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, n.cfg.RetryMax)
}

// decided reports whether the item already left pending: nobody needs to
// be told any more.
func (n *Notifier) decided(ctx context.Context, tenant, personID, itemID string) (bool, error) {
	subj, err := streams.ApprovalItemSubject(tenant, personID, itemID)
	if err != nil {
		return false, fmt.Errorf("notify: %w", err)
	}
	m, err := n.d.Bus.LastMessage(ctx, subj)
	if err != nil || m == nil {
		return false, err
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return false, err
	}
	return ev.GetApprovalDecided() != nil, nil
}

// last reads the last attempt on an item's channel: its sequence, the
// next attempt's number, and whether the channel is done with the item.
func (n *Notifier) last(ctx context.Context, tenant, personID, itemID string, t target) (pendingOn, bool, error) {
	p := pendingOn{attempt: 1}
	subj, err := streams.NotificationSubject(tenant, personID, itemID, t.token)
	if err != nil {
		return p, false, fmt.Errorf("notify: %w", err)
	}
	p.subject = subj
	m, err := n.d.Bus.LastMessage(ctx, subj)
	if err != nil {
		return p, false, fmt.Errorf("notify: last attempt on %s: %w", subj, err)
	}
	if m == nil {
		return p, false, nil
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		return p, false, fmt.Errorf("notify: last attempt on %s: %w", subj, err)
	}
	a := ev.GetNotificationAttempted()
	p.seq, p.attempt = m.Sequence, a.GetAttempt()+1
	return p, a.GetDelivered() || strings.HasPrefix(a.GetError(), gaveUp), nil
}

// batch is what one message on t tells: the item alone, or with a digest
// every pending item of the person not yet notified on t (the handled item
// first, then by creation). Empty when t is done with the item.
func (n *Notifier) batch(ctx context.Context, tenant, personID string, it item, t target) ([]pendingOn, error) {
	p, done, err := n.last(ctx, tenant, personID, it.ID, t)
	if err != nil || done {
		return nil, err
	}
	p.item = it
	out := []pendingOn{p}
	if n.cfg.Digest <= 0 {
		return out, nil
	}
	list, err := n.d.Pending(ctx, tenant, personID)
	if err != nil {
		return nil, fmt.Errorf("notify: pending items of %s: %w", personID, err)
	}
	slices.SortFunc(list, func(a, b items.Item) int { return a.Created.Compare(b.Created) })
	for _, other := range list {
		if other.State != items.Pending || other.ID == it.ID {
			continue
		}
		op, done, err := n.last(ctx, tenant, personID, other.ID, t)
		if err != nil {
			return nil, err
		}
		if done {
			continue
		}
		op.item = itemOf(other)
		out = append(out, op)
	}
	return out, nil
}

// record appends one attempt on each item's subject of the channel,
// expecting the subject where it was read: a concurrent handler that
// recorded first wins, and this one's record is dropped.
func (n *Notifier) record(ctx context.Context, cause *alpv1.Event, t target, personID string, batch []pendingOn, sendErr error, final bool) error {
	var ids []string
	if len(batch) > 1 {
		for _, p := range batch {
			ids = append(ids, p.item.ID)
		}
	}
	msg := ""
	if sendErr != nil {
		msg = sendErr.Error()
		if final && !strings.HasPrefix(msg, gaveUp) {
			msg = gaveUp + msg
		}
	}
	var errs []error
	for _, p := range batch {
		ev := n.event(cause, &alpv1.NotificationAttempted{ItemId: p.item.ID, PersonId: personID, Channel: t.channel,
			Target: t.addr, Attempt: p.attempt, Delivered: sendErr == nil, Error: msg, ItemIds: ids})
		if _, err := n.d.Bus.Append(ctx, p.subject, p.seq, ev); err != nil {
			if errors.Is(err, bus.ErrConflict) {
				n.d.Logger.InfoContext(ctx, "notify: another attempt was recorded first", "subject", p.subject)
				continue
			}
			errs = append(errs, fmt.Errorf("notify: recording attempt %d on %s: %w", p.attempt, p.subject, err))
		}
	}
	return errors.Join(errs...)
}

// event wraps an attempt. No causation id: the bus derives Nats-Msg-Id from
// the cause, and every attempt on every channel of one item has the same
// cause, so the stream would drop all but the first as duplicates; the
// correlation id still ties it to the item's request.
func (n *Notifier) event(cause *alpv1.Event, a *alpv1.NotificationAttempted) *alpv1.Event {
	ch := cause.GetHeader()
	corr := ch.GetCorrelationId()
	if corr == "" {
		corr = ch.GetEventId()
	}
	return &alpv1.Event{
		Header: &alpv1.EventHeader{Type: "notification_attempted", SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
			CorrelationId: corr, Tenant: ch.GetTenant(), ProducerRole: alpv1.Role_ROLE_APPROVALS,
			Occurred: timestamppb.New(n.d.Now())},
		Body: &alpv1.Event_NotificationAttempted{NotificationAttempted: a},
	}
}

// finalError is a failure no retry fixes (410 Gone, a header that would
// inject lines).
type finalError struct{ err error }

func (f finalError) Error() string { return f.err.Error() }
func (f finalError) Unwrap() error { return f.err }

func isFinal(err error) bool {
	var f finalError
	return errors.As(err, &f)
}

// send sends one message on t about the batch.
func (n *Notifier) send(ctx context.Context, t target, tenant, personID string, batch []pendingOn) error {
	its := make([]item, len(batch))
	ids := make([]string, len(batch))
	for i, p := range batch {
		its[i], ids[i] = p.item, p.item.ID
	}
	// One webhook-id per item (or set of items) and channel, the same on
	// every retry, so a receiver drops a repeat it already has.
	msgID := "msg_" + bus.HashID(append([]string{tenant, personID, t.token}, ids...)...)
	switch t.channel {
	case ChannelWebhook:
		return n.postWebhook(ctx, t.hook, msgID, webhookBody(n, its))
	default:
		subject, body := n.emailText(its)
		return n.sendMail(ctx, t.addr, subject, body)
	}
}

// ChannelResult is how a test notification went on one channel.
type ChannelResult struct {
	Channel   string `json:"channel"`
	Target    string `json:"target"`
	Delivered bool   `json:"delivered"`
	Error     string `json:"error,omitempty"`
}

// TestResult is TestSend's answer.
type TestResult struct {
	Channels []ChannelResult `json:"channels"`
}

// testTimeout bounds a test send: the person waits on the page.
const testTimeout = 20 * time.Second

// TestSend sends a test notification to every channel of the person now
// (quiet hours do not apply: the person asked) and says how each went;
// nothing is recorded. An error when nothing is configured for them.
func (n *Notifier) TestSend(r *http.Request, tenant, personID string) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), testTimeout)
	defer cancel()
	targets, err := n.targets(ctx, tenant, personID)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, httpjson.Errorf(http.StatusConflict, api.CodeNotificationsMissing, "no webhook or email is configured for you")
	}
	res := TestResult{Channels: []ChannelResult{}}
	for _, t := range targets {
		var err error
		switch t.channel {
		case ChannelWebhook:
			body, _ := jsonBody(map[string]string{"type": "approval.test", "link": n.cfg.PublicURL + "/approvals/"})
			err = n.postWebhook(ctx, t.hook, "msg_test_"+uuid.NewString(), body)
		default:
			err = n.sendMail(ctx, t.addr, "Test notification from your ALP broker",
				"This is a test. Approval requests will be announced like this, with a link to\r\n"+n.cfg.PublicURL+"/approvals/\r\n")
		}
		cr := ChannelResult{Channel: t.channel, Target: t.addr, Delivered: err == nil}
		if err != nil {
			cr.Error = err.Error()
		}
		res.Channels = append(res.Channels, cr)
	}
	return res, nil
}
