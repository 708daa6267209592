package notify

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/approvals/api"
	"github.com/alpd-project/alpd/services/approvals/items"
)

const (
	tenant = "b.example"
	lee    = "p_lee"
	ann    = "p_ann"
	public = "https://alp.b.example"
	// sealedSecret is only in the sealed payload's bytes: no notification
	// may carry it.
	sealedSecret = "HELD-SECRET-salary-120000"
)

var addresses = map[string]string{lee: "lee@b.example", ann: "ann@b.example"}

func addressOf(_ context.Context, t, p string) (string, error) {
	if a, ok := addresses[p]; ok && t == tenant {
		return a, nil
	}
	return "", fmt.Errorf("no person %s of %s", p, t)
}

var secret = []byte("0123456789abcdef-webhook-secret")

// rig is a real nats-server with the approvals stream.
type rig struct {
	t *testing.T
	b *bus.Bus
}

func newRig(t *testing.T) *rig {
	t.Helper()
	srv := natstest.RunJetStream(t)
	nc := natstest.Connect(t, srv)
	b, err := bus.New(nc, bus.Options{Namespace: "alpd", CheckProducer: streams.CheckProducer})
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range streams.Owned(alpv1.Role_ROLE_APPROVALS, []string{tenant}, streams.Limits{}) {
		if _, err := b.EnsureStream(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	return &rig{t: t, b: b}
}

func (r *rig) notifier(cfg Config, d Deps) *Notifier {
	r.t.Helper()
	d.Bus = r.b
	if d.Address == nil {
		d.Address = addressOf
	}
	if cfg.PublicURL == "" {
		cfg.PublicURL = public
	}
	if cfg.RetryMin == 0 {
		cfg.RetryMin = 50 * time.Millisecond
		cfg.RetryMax = 200 * time.Millisecond
	}
	n, err := New(cfg, d)
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// request is an ApprovalRequested for the person, with the secret only in
// the sealed payload's bytes.
func request(personID, id string, created time.Time) *alpv1.Event {
	return &alpv1.Event{
		Header: &alpv1.EventHeader{Type: "approval_requested", SchemaVersion: 1, EventId: uuid.Must(uuid.NewV7()).String(),
			CorrelationId: "corr-" + id, Tenant: tenant, ProducerRole: alpv1.Role_ROLE_APPROVALS, Occurred: timestamppb.New(created)},
		Body: &alpv1.Event_ApprovalRequested{ApprovalRequested: &alpv1.ApprovalRequested{
			ItemId: id, PersonId: personID, Kind: alpv1.HeldKind_HELD_KIND_COMMITMENT, EnvelopeId: "env-" + id,
			From: "ana@a.example", Type: "meeting.accept/v1", Commits: "meeting",
			Disclosed:   []*alpv1.DisclosedField{{Pointer: "/salary", Class: "confidential"}},
			Payload:     &alpv1.SealedBody{Tenant: tenant, PersonId: personID, KeyVersion: 1, Nonce: []byte("nonce"), Ciphertext: []byte(sealedSecret)},
			BindingCode: "K7QP-" + strings.ToUpper(id), Created: timestamppb.New(created), Expires: timestamppb.New(created.Add(72 * time.Hour)),
		}},
	}
}

// publish stores the request on its item subject.
func (r *rig) publish(ev *alpv1.Event) bus.Delivery {
	r.t.Helper()
	req := ev.GetApprovalRequested()
	subj, err := streams.ApprovalItemSubject(tenant, req.GetPersonId(), req.GetItemId())
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.b.Publish(context.Background(), subj, ev); err != nil {
		r.t.Fatal(err)
	}
	return bus.Delivery{Event: ev, Subject: subj}
}

// consume runs the notifier as the service does: the approvals_notify
// durable, without a delivery limit.
func (r *rig) consume(n *Notifier) *bus.Consumer {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	for _, c := range streams.OwnedConsumers(alpv1.Role_ROLE_APPROVALS, 0) {
		if c.Durable != streams.ApprovalsNotify {
			continue
		}
		spec := c.Spec()
		spec.MaxDeliver = -1
		spec.Workers = 2
		cons, err := r.b.Consume(ctx, spec, n.Handle)
		if err != nil {
			r.t.Fatal(err)
		}
		return cons
	}
	r.t.Fatal("no approvals_notify consumer")
	return nil
}

// settled reports whether the consumer has nothing left to handle or retry.
func (r *rig) settled(cons *bus.Consumer) bool {
	s, err := r.b.JetStream().Stream(context.Background(), r.b.StreamName(streams.Approvals))
	if err != nil {
		return false
	}
	c, err := s.Consumer(context.Background(), cons.Name())
	if err != nil {
		return false
	}
	info, err := c.Info(context.Background())
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// attempts are every NotificationAttempted on an item's channel, in order.
func (r *rig) attempts(personID, itemID, token string) []*alpv1.NotificationAttempted {
	r.t.Helper()
	subj, err := streams.NotificationSubject(tenant, personID, itemID, token)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx := context.Background()
	s, err := r.b.JetStream().Stream(ctx, r.b.StreamName(streams.Approvals))
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []*alpv1.NotificationAttempted
	for {
		batch, err := c.FetchNoWait(100)
		if err != nil {
			r.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev, err := bus.Decode(m.Data())
			if err != nil {
				r.t.Fatal(err)
			}
			if ev.GetHeader().GetType() != "notification_attempted" || ev.GetHeader().GetProducerRole() != alpv1.Role_ROLE_APPROVALS {
				r.t.Fatalf("attempt event header %v", ev.GetHeader())
			}
			out = append(out, ev.GetNotificationAttempted())
		}
		if n == 0 {
			return out
		}
	}
}

// waitFor polls cond for up to 15s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// receiver is a webhook endpoint answering fail (e.g. 503) to the first
// failFirst calls.
type receiver struct {
	*httptest.Server
	mu        sync.Mutex
	calls     []call
	failFirst int
	fail      int
}

type call struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newReceiver(t *testing.T, failFirst, fail int) *receiver {
	rc := &receiver{failFirst: failFirst, fail: fail}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.calls = append(rc.calls, call{header: r.Header.Clone(), body: body, at: time.Now()})
		n := len(rc.calls)
		rc.mu.Unlock()
		if n <= rc.failFirst {
			http.Error(w, "down for maintenance", rc.fail)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) got() []call {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]call(nil), rc.calls...)
}

func hookFor(url string) Webhook { return Webhook{URL: url, Secret: secret, Tenant: tenant} }

// TestWebhookRetriedUntilDelivered: a receiver down (503) for its first
// two calls gets the notification on the third, through the real
// consumer; each call is signed (a tampered body or an old timestamp
// fails), carries the link and binding code but nothing held, keeps one
// webhook-id, and every attempt is recorded; a redelivery sends nothing.
func TestWebhookRetriedUntilDelivered(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 2, http.StatusServiceUnavailable)
	n := r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}}, Deps{})
	cons := r.consume(n)
	d := r.publish(request(lee, "i1", time.Now()))
	token := webhookToken(rc.URL)
	waitFor(t, "three attempts", func() bool { return len(r.attempts(lee, "i1", token)) == 3 })
	waitFor(t, "the consumer to settle", func() bool { return r.settled(cons) })

	calls := rc.got()
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3", len(calls))
	}
	for i, c := range calls {
		if err := VerifyWebhook(secret, c.header, c.body, time.Now(), 5*time.Minute); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if c.header.Get(HeaderWebhookID) != calls[0].header.Get(HeaderWebhookID) {
			t.Fatalf("webhook-id changed between retries: %s, %s", calls[0].header.Get(HeaderWebhookID), c.header.Get(HeaderWebhookID))
		}
	}
	last := calls[2]
	var body map[string]any
	if err := json.Unmarshal(last.body, &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "approval.pending", "item_id": "i1", "kind": "commitment", "envelope_id": "env-i1",
		"from": "ana@a.example", "message_type": "meeting.accept/v1", "binding_code": "K7QP-I1",
		"link": public + "/approvals/items/i1"}
	for k, v := range want {
		if body[k] != v {
			t.Errorf("body %s = %v, want %v", k, body[k], v)
		}
	}
	if _, err := time.Parse(time.RFC3339, fmt.Sprint(body["expires"])); err != nil {
		t.Errorf("expires: %v", err)
	}
	if len(body) != len(want)+1 {
		t.Errorf("body has other keys: %s", last.body)
	}
	if strings.Contains(string(last.body), sealedSecret) || strings.Contains(string(last.body), "/salary") {
		t.Fatalf("the webhook carries held data: %s", last.body)
	}

	tampered := []byte(strings.Replace(string(last.body), "i1", "i2", 1))
	if err := VerifyWebhook(secret, last.header, tampered, time.Now(), 5*time.Minute); !errors.Is(err, ErrWebhookSignature) {
		t.Fatalf("tampered body: %v", err)
	}
	if err := VerifyWebhook([]byte("another-secret-of-16-bytes"), last.header, last.body, time.Now(), 5*time.Minute); !errors.Is(err, ErrWebhookSignature) {
		t.Fatalf("wrong secret: %v", err)
	}
	if err := VerifyWebhook(secret, last.header, last.body, time.Now().Add(10*time.Minute), 5*time.Minute); !errors.Is(err, ErrWebhookTimestamp) {
		t.Fatalf("old timestamp: %v", err)
	}
	if err := VerifyWebhook(secret, http.Header{}, last.body, time.Now(), 5*time.Minute); !errors.Is(err, ErrWebhookHeaders) {
		t.Fatalf("no headers: %v", err)
	}

	atts := r.attempts(lee, "i1", token)
	for i, a := range atts {
		if a.GetAttempt() != uint32(i+1) || a.GetChannel() != ChannelWebhook || a.GetTarget() != rc.URL || a.GetItemId() != "i1" || a.GetPersonId() != lee {
			t.Fatalf("attempt %d: %v", i, a)
		}
		if delivered := i == 2; a.GetDelivered() != delivered || (a.GetError() == "") == !delivered {
			t.Fatalf("attempt %d: delivered %v error %q", i, a.GetDelivered(), a.GetError())
		}
	}
	if !strings.Contains(atts[0].GetError(), "503") {
		t.Fatalf("first attempt's error %q", atts[0].GetError())
	}

	// A redelivery (lost ack, restart) sends nothing and records nothing.
	d.Repeat = true
	if err := n.Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if len(rc.got()) != 3 || len(r.attempts(lee, "i1", token)) != 3 {
		t.Fatal("a redelivery notified again")
	}
}

// TestWebhookGoneStops: 410 Gone is recorded once and never retried.
func TestWebhookGoneStops(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 100, http.StatusGone)
	n := r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}}, Deps{})
	d := r.publish(request(lee, "i1", time.Now()))
	for range 2 {
		if err := n.Handle(context.Background(), d); err != nil {
			t.Fatalf("410 Gone: %v", err)
		}
	}
	atts := r.attempts(lee, "i1", webhookToken(rc.URL))
	if len(rc.got()) != 1 || len(atts) != 1 || atts[0].GetDelivered() || !strings.HasPrefix(atts[0].GetError(), gaveUp) {
		t.Fatalf("calls %d, attempts %v", len(rc.got()), atts)
	}
}

// TestGivesUpAfterMaxAge: a failure after MaxAge is the last attempt.
func TestGivesUpAfterMaxAge(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 100, http.StatusInternalServerError)
	n := r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}, MaxAge: time.Hour}, Deps{})
	d := r.publish(request(lee, "i1", time.Now()))
	if err := n.Handle(context.Background(), d); err == nil {
		t.Fatal("a failure inside MaxAge asks for no retry")
	}
	old := r.publish(request(lee, "i2", time.Now().Add(-2*time.Hour)))
	if err := n.Handle(context.Background(), old); err != nil {
		t.Fatalf("failure after MaxAge: %v", err)
	}
	if err := n.Handle(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	atts := r.attempts(lee, "i2", webhookToken(rc.URL))
	if len(atts) != 1 || atts[0].GetDelivered() || !strings.HasPrefix(atts[0].GetError(), gaveUp) {
		t.Fatalf("attempts %v", atts)
	}
	if a := r.attempts(lee, "i1", webhookToken(rc.URL)); len(a) != 1 || strings.HasPrefix(a[0].GetError(), gaveUp) {
		t.Fatalf("attempts inside MaxAge %v", a)
	}
}

// TestDecidedItemIsNotNotified: an item decided before its notification
// went out tells nobody.
func TestDecidedItemIsNotNotified(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 0, 0)
	n := r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}}, Deps{})
	ev := request(lee, "i1", time.Now())
	d := r.publish(ev)
	dec := &alpv1.Event{Header: &alpv1.EventHeader{Type: "approval_decided", EventId: uuid.Must(uuid.NewV7()).String(), Tenant: tenant,
		ProducerRole: alpv1.Role_ROLE_APPROVALS, Occurred: timestamppb.Now()},
		Body: &alpv1.Event_ApprovalDecided{ApprovalDecided: &alpv1.ApprovalDecided{ItemId: "i1", PersonId: lee, State: alpv1.ApprovalState_APPROVAL_STATE_DENIED}}}
	if _, err := r.b.Publish(context.Background(), d.Subject, dec); err != nil {
		t.Fatal(err)
	}
	if err := n.Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := n.Handle(context.Background(), bus.Delivery{Event: dec, Subject: d.Subject}); err != nil {
		t.Fatal(err)
	}
	if len(rc.got()) != 0 {
		t.Fatal("a decided item was notified")
	}
}

// smtpSink is a real SMTP server (go-smtp) keeping what it receives.
type smtpSink struct {
	addr  string
	roots *x509.CertPool
	mu    sync.Mutex
	mails []received
}

type received struct {
	from, user string
	to         []string
	tls        bool
	data       string
}

type smtpSession struct {
	s    *smtpSink
	conn *smtp.Conn
	cur  received
}

func (s *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *smtpSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "notifier" || pass != "s3cret" {
			return errors.New("bad credentials")
		}
		s.cur.user = user
		return nil
	}), nil
}
func (s *smtpSession) Mail(from string, _ *smtp.MailOptions) error { s.cur.from = from; return nil }
func (s *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.cur.to = append(s.cur.to, to)
	return nil
}
func (s *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.cur.data = string(b)
	_, s.cur.tls = s.conn.TLSConnectionState()
	s.s.mu.Lock()
	s.s.mails = append(s.s.mails, s.cur)
	s.s.mu.Unlock()
	return nil
}
func (s *smtpSession) Reset()        { s.cur = received{user: s.cur.user} }
func (s *smtpSession) Logout() error { return nil }

// newSMTPSink starts the server on 127.0.0.1, offering STARTTLS with a
// certificate made here when withTLS.
func newSMTPSink(t *testing.T, withTLS bool) *smtpSink {
	t.Helper()
	sink := &smtpSink{}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		return &smtpSession{s: sink, conn: c}, nil
	}))
	srv.Domain = "mail.test"
	srv.ReadTimeout, srv.WriteTimeout = 10*time.Second, 10*time.Second
	if withTLS {
		cert, roots := selfSigned(t)
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		sink.roots = roots
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink.addr = l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sink
}

func (s *smtpSink) got() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.mails...)
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func emailConfig(sink *smtpSink) *Email {
	return &Email{Addr: sink.addr, From: "alpd approvals <approvals@b.example>", Username: "notifier", Password: "s3cret",
		RootCAs: sink.roots, To: map[string]string{"lee@b.example": "lee.home@mail.test"}}
}

// TestEmailOverSTARTTLS: the email goes over STARTTLS with the generated
// certificate, authenticated, to the mapped address (others to their ALP
// address), with the link and binding code and nothing held; a redelivery
// sends no second email.
func TestEmailOverSTARTTLS(t *testing.T) {
	r := newRig(t)
	sink := newSMTPSink(t, true)
	n := r.notifier(Config{Email: emailConfig(sink)}, Deps{})
	d := r.publish(request(lee, "i1", time.Now()))
	for range 2 {
		if err := n.Handle(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	mails := sink.got()
	if len(mails) != 1 {
		t.Fatalf("%d mails, want 1", len(mails))
	}
	m := mails[0]
	if !m.tls || m.user != "notifier" || m.from != "approvals@b.example" || len(m.to) != 1 || m.to[0] != "lee.home@mail.test" {
		t.Fatalf("mail envelope %+v", m)
	}
	for _, want := range []string{"\r\nSubject: Approval needed: commitment from ana@a.example\r\n", "\r\nTo: lee.home@mail.test\r\n",
		"\r\nFrom: \"alpd approvals\" <approvals@b.example>\r\n", "\r\nMIME-Version: 1.0\r\n",
		"\r\nContent-Type: text/plain; charset=utf-8\r\n", "\r\nMessage-ID: <", "K7QP-I1", public + "/approvals/items/i1"} {
		if !strings.Contains(m.data, want) {
			t.Errorf("mail lacks %q:\n%s", want, m.data)
		}
	}
	if !strings.HasPrefix(m.data, "Date: ") || strings.Contains(m.data, sealedSecret) || strings.Contains(m.data, "/salary") {
		t.Fatalf("mail:\n%s", m.data)
	}
	atts := r.attempts(lee, "i1", ChannelEmail)
	if len(atts) != 1 || !atts[0].GetDelivered() || atts[0].GetTarget() != "lee.home@mail.test" || atts[0].GetChannel() != ChannelEmail {
		t.Fatalf("attempts %v", atts)
	}

	// Ann is not in To: her ALP address is her email.
	if err := n.Handle(context.Background(), r.publish(request(ann, "i2", time.Now()))); err != nil {
		t.Fatal(err)
	}
	if mails := sink.got(); len(mails) != 2 || mails[1].to[0] != "ann@b.example" {
		t.Fatalf("ann's mail %+v", mails)
	}
}

// TestEmailSTARTTLSModes: "required" refuses a server without STARTTLS
// (recorded, retried); a password is never sent without TLS; a certificate
// not trusted fails; "opportunistic" without credentials sends in clear.
func TestEmailSTARTTLSModes(t *testing.T) {
	r := newRig(t)
	plain := newSMTPSink(t, false)

	cfg := emailConfig(plain)
	n := r.notifier(Config{Email: cfg}, Deps{})
	d := r.publish(request(lee, "i1", time.Now()))
	if err := n.Handle(context.Background(), d); err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("required STARTTLS on a plain server: %v", err)
	}
	if atts := r.attempts(lee, "i1", ChannelEmail); len(atts) != 1 || atts[0].GetDelivered() || !strings.Contains(atts[0].GetError(), "STARTTLS") {
		t.Fatalf("attempts %v", atts)
	}

	cfg = emailConfig(plain)
	cfg.StartTLS = StartTLSOpportunistic
	n = r.notifier(Config{Email: cfg}, Deps{})
	if err := n.Handle(context.Background(), d); err == nil || !strings.Contains(err.Error(), "without TLS") {
		t.Fatalf("password without TLS: %v", err)
	}

	tlsSink := newSMTPSink(t, true)
	cfg = emailConfig(tlsSink)
	cfg.RootCAs = x509.NewCertPool()
	n = r.notifier(Config{Email: cfg}, Deps{})
	if err := n.Handle(context.Background(), d); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted certificate: %v", err)
	}

	cfg = emailConfig(plain)
	cfg.StartTLS, cfg.Username, cfg.Password = StartTLSOpportunistic, "", ""
	n = r.notifier(Config{Email: cfg}, Deps{})
	if err := n.Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if len(plain.got()) != 1 || len(tlsSink.got()) != 0 {
		t.Fatalf("plain %d, tls %d mails", len(plain.got()), len(tlsSink.got()))
	}
	atts := r.attempts(lee, "i1", ChannelEmail)
	if len(atts) != 4 || !atts[3].GetDelivered() || atts[3].GetAttempt() != 4 {
		t.Fatalf("attempts %v", atts)
	}
}

// TestHeaderInjectionRefused: a sender address with a line break would
// add mail headers: nothing is sent and no retry can fix it.
func TestHeaderInjectionRefused(t *testing.T) {
	r := newRig(t)
	sink := newSMTPSink(t, true)
	n := r.notifier(Config{Email: emailConfig(sink)}, Deps{})
	ev := request(lee, "i1", time.Now())
	ev.GetApprovalRequested().From = "ana@a.example\r\nBcc: everyone@evil.example"
	d := r.publish(ev)
	if err := n.Handle(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	atts := r.attempts(lee, "i1", ChannelEmail)
	if len(sink.got()) != 0 || len(atts) != 1 || !strings.Contains(atts[0].GetError(), "line break") || !strings.HasPrefix(atts[0].GetError(), gaveUp) {
		t.Fatalf("mails %d, attempts %v", len(sink.got()), atts)
	}
}

// TestQuietHoursDelay: inside quiet hours nothing is sent nor recorded;
// through the consumer the notification goes out when they end.
func TestQuietHoursDelay(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 0, 0)
	night := time.Date(2026, 12, 2, 23, 30, 0, 0, time.UTC)
	n := r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}, QuietHours: &QuietHours{Start: "22:00", End: "07:00"}},
		Deps{Now: func() time.Time { return night }})
	d := r.publish(request(lee, "i1", night))
	if err := n.Handle(context.Background(), d); err == nil {
		t.Fatal("quiet hours asked for no delay")
	}
	if len(rc.got()) != 0 || len(r.attempts(lee, "i1", webhookToken(rc.URL))) != 0 {
		t.Fatal("sent in quiet hours")
	}

	// Real time: quiet hours that end about 1.5s from now, in a zone
	// whose offset puts that moment on a minute.
	end := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second)
	zone := time.FixedZone("q", -int(end.Unix()%60))
	local := end.In(zone)
	n = r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}, QuietHours: &QuietHours{
		Start: local.Add(-time.Hour).Format("15:04"), End: local.Format("15:04"), Location: zone}}, Deps{})
	// The consumer hands it i1 too (it is on the stream): both wait.
	r.consume(n)
	r.publish(request(lee, "i2", time.Now()))
	waitFor(t, "the notifications after quiet hours", func() bool { return len(rc.got()) == 2 })
	for _, c := range rc.got() {
		if c.at.Before(end) {
			t.Fatalf("sent at %s, quiet hours end at %s", c.at, end)
		}
	}
}

func TestQuietUntil(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no tz database:", err)
	}
	wrap := &quiet{start: 22 * 60, end: 7 * 60, loc: time.UTC}
	day := &quiet{start: 12 * 60, end: 13 * 60, loc: ny}
	for _, c := range []struct {
		q    *quiet
		now  time.Time
		want time.Duration
	}{
		{wrap, time.Date(2026, 1, 1, 23, 0, 0, 0, time.UTC), 8 * time.Hour},
		{wrap, time.Date(2026, 1, 1, 6, 30, 0, 0, time.UTC), 30 * time.Minute},
		{wrap, time.Date(2026, 1, 1, 7, 0, 0, 0, time.UTC), 0},
		{wrap, time.Date(2026, 1, 1, 21, 59, 0, 0, time.UTC), 0},
		{day, time.Date(2026, 1, 1, 12, 15, 0, 0, ny), 45 * time.Minute},
		{day, time.Date(2026, 1, 1, 13, 15, 0, 0, ny), 0},
		{nil, time.Now(), 0},
	} {
		if got := c.q.until(c.now); got != c.want {
			t.Errorf("until(%s) = %s, want %s", c.now, got, c.want)
		}
	}
}

// TestDigestGroupsTwoItems: with a digest, two items of one person make
// one webhook and one email listing both; each item records the attempt
// with both ids, and neither is notified again.
func TestDigestGroupsTwoItems(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 0, 0)
	sink := newSMTPSink(t, true)
	now := time.Now()
	var mu sync.Mutex
	var pending []items.Item
	n := r.notifier(Config{Webhooks: []Webhook{hookFor(rc.URL)}, Email: emailConfig(sink), Digest: 400 * time.Millisecond},
		Deps{Pending: func(_ context.Context, tn, p string) ([]items.Item, error) {
			mu.Lock()
			defer mu.Unlock()
			if tn != tenant || p != lee {
				return nil, nil
			}
			return append([]items.Item(nil), pending...), nil
		}})
	cons := r.consume(n)
	for i, id := range []string{"i1", "i2"} {
		ev := request(lee, id, now.Add(time.Duration(i)*100*time.Millisecond))
		req := ev.GetApprovalRequested()
		mu.Lock()
		pending = append(pending, items.Item{ID: id, Tenant: tenant, PersonID: lee, Kind: items.Commitment, State: items.Pending,
			EnvelopeID: req.GetEnvelopeId(), From: req.GetFrom(), Type: req.GetType(), BindingCode: req.GetBindingCode(),
			Created: req.GetCreated().AsTime(), Expires: req.GetExpires().AsTime()})
		mu.Unlock()
		r.publish(ev)
	}
	// A decided item of lee is not listed.
	mu.Lock()
	pending = append(pending, items.Item{ID: "i0", Kind: items.Commitment, State: items.Denied, Created: now.Add(-time.Hour)})
	mu.Unlock()
	waitFor(t, "both items recorded on both channels", func() bool {
		return len(r.attempts(lee, "i2", ChannelEmail)) == 1 && len(r.attempts(lee, "i2", webhookToken(rc.URL))) == 1
	})
	waitFor(t, "the consumer to settle", func() bool { return r.settled(cons) })
	calls, mails := rc.got(), sink.got()
	if len(calls) != 1 || len(mails) != 1 {
		t.Fatalf("%d webhooks and %d mails, want one of each", len(calls), len(mails))
	}
	if time.Since(now) < 400*time.Millisecond || calls[0].at.Before(now.Add(400*time.Millisecond)) {
		t.Fatal("the digest went out before its time")
	}
	var body struct {
		Type  string `json:"type"`
		Items []struct {
			ItemID, Link string
			BindingCode  string `json:"binding_code"`
		} `json:"items"`
	}
	if err := json.Unmarshal(calls[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != "approval.pending.digest" || len(body.Items) != 2 || body.Items[0].BindingCode != "K7QP-I1" || body.Items[1].BindingCode != "K7QP-I2" {
		t.Fatalf("digest body %s", calls[0].body)
	}
	if err := VerifyWebhook(secret, calls[0].header, calls[0].body, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Subject: Approval needed: 2 requests", "K7QP-I1", "K7QP-I2", public + "/approvals/items/i1", public + "/approvals/items/i2"} {
		if !strings.Contains(mails[0].data, want) {
			t.Errorf("digest mail lacks %q:\n%s", want, mails[0].data)
		}
	}
	for _, id := range []string{"i1", "i2"} {
		for _, tok := range []string{ChannelEmail, webhookToken(rc.URL)} {
			atts := r.attempts(lee, id, tok)
			if len(atts) != 1 || !atts[0].GetDelivered() || len(atts[0].GetItemIds()) != 2 || atts[0].GetItemId() != id {
				t.Fatalf("%s on %s: %v", id, tok, atts)
			}
		}
	}
}

// TestTestSend: the person's channels get a test now, each reported; a
// person without any is told so with the API's code.
func TestTestSend(t *testing.T) {
	r := newRig(t)
	rc := newReceiver(t, 0, 0)
	down := newReceiver(t, 100, http.StatusBadGateway)
	sink := newSMTPSink(t, true)
	n := r.notifier(Config{Webhooks: []Webhook{
		{URL: rc.URL, Secret: secret, Person: "lee@b.example"},
		{URL: down.URL, Secret: secret, Tenant: tenant},
	}, Email: emailConfig(sink)}, Deps{})
	req := httptest.NewRequest(http.MethodPost, api.PathTestNotification, nil)
	res, err := n.TestSend(req, tenant, lee)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(res)
	var out TestResult
	if err := json.Unmarshal(got, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Channels) != 3 || !out.Channels[0].Delivered || out.Channels[1].Delivered || !strings.Contains(out.Channels[1].Error, "502") ||
		!out.Channels[2].Delivered || out.Channels[2].Channel != ChannelEmail || out.Channels[2].Target != "lee.home@mail.test" {
		t.Fatalf("test result %s", got)
	}
	if c := rc.got(); len(c) != 1 || VerifyWebhook(secret, c[0].header, c[0].body, time.Now(), time.Minute) != nil {
		t.Fatal("no signed test webhook")
	}
	if len(sink.got()) != 1 || !strings.Contains(sink.got()[0].data, "Subject: Test notification") {
		t.Fatal("no test mail")
	}
	if len(r.attempts(lee, "test", ChannelEmail)) != 0 {
		t.Fatal("a test was recorded")
	}

	// Ann has only the tenant's webhook; a person of another tenant nothing.
	n = r.notifier(Config{Webhooks: []Webhook{{URL: rc.URL, Secret: secret, Person: "lee@b.example"}}}, Deps{})
	_, err = n.TestSend(req, tenant, ann)
	var he *httpjson.Error
	if !errors.As(err, &he) || he.Code != api.CodeNotificationsMissing {
		t.Fatalf("nothing configured: %v", err)
	}
}

// TestBadConfig: every malformed setting is refused with what is wrong.
func TestBadConfig(t *testing.T) {
	ok := Webhook{URL: "https://hooks.example/alp", Secret: secret, Tenant: tenant}
	with := func(f func(*Webhook)) Config {
		w := ok
		f(&w)
		return Config{PublicURL: public, Webhooks: []Webhook{w}}
	}
	mail := func(f func(*Email)) Config {
		e := Email{Addr: "smtp.example:587", From: "approvals@b.example"}
		f(&e)
		return Config{PublicURL: public, Email: &e}
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"nothing", Config{PublicURL: public}, "no webhook and no email"},
		{"no public url", Config{Webhooks: []Webhook{ok}}, "public_url"},
		{"relative public url", Config{PublicURL: "/x", Webhooks: []Webhook{ok}}, "public_url"},
		{"bad url", with(func(w *Webhook) { w.URL = "://x" }), "webhooks[0]: url"},
		{"http to a remote host", with(func(w *Webhook) { w.URL = "http://hooks.example/alp" }), "not loopback"},
		{"ftp", with(func(w *Webhook) { w.URL = "ftp://hooks.example/alp" }), "scheme must be https"},
		{"credentials in url", with(func(w *Webhook) { w.URL = "https://u:p@hooks.example/alp" }), "credentials"},
		{"empty secret", with(func(w *Webhook) { w.Secret = nil }), "secret of 0 bytes"},
		{"short secret", with(func(w *Webhook) { w.Secret = []byte("short") }), "at least 16"},
		{"no tenant", with(func(w *Webhook) { w.Tenant = "" }), "tenant is required"},
		{"bad person", with(func(w *Webhook) { w.Person = "not an address" }), "person"},
		{"person of another tenant", with(func(w *Webhook) { w.Person = "lee@c.example" }), "not of tenant"},
		{"bad smtp addr", mail(func(e *Email) { e.Addr = "smtp.example" }), "host:port"},
		{"bad smtp port", mail(func(e *Email) { e.Addr = "smtp.example:99999" }), "host:port"},
		{"bad from", mail(func(e *Email) { e.From = "nobody" }), "from"},
		{"from with a line break", mail(func(e *Email) { e.From = "a@b.example\r\nBcc: x@y.example" }), "line break"},
		{"bad starttls", mail(func(e *Email) { e.StartTLS = "maybe" }), "starttls"},
		{"password alone", mail(func(e *Email) { e.Password = "x" }), "password without username"},
		{"credentials in clear", mail(func(e *Email) { e.Username, e.StartTLS = "u", StartTLSOff }), "in clear"},
		{"bad to key", mail(func(e *Email) { e.To = map[string]string{"nobody": "a@b.example"} }), "to:"},
		{"bad to value", mail(func(e *Email) { e.To = map[string]string{"lee@b.example": "nope"} }), "to[lee@b.example]"},
		{"bad quiet start", Config{PublicURL: public, Webhooks: []Webhook{ok}, QuietHours: &QuietHours{Start: "25:00", End: "07:00"}}, "quiet_hours: start"},
		{"bad quiet end", Config{PublicURL: public, Webhooks: []Webhook{ok}, QuietHours: &QuietHours{Start: "22:00", End: "7am"}}, "quiet_hours: end"},
		{"empty quiet window", Config{PublicURL: public, Webhooks: []Webhook{ok}, QuietHours: &QuietHours{Start: "22:00", End: "22:00"}}, "both 22:00"},
		{"retry order", Config{PublicURL: public, Webhooks: []Webhook{ok}, RetryMin: time.Minute, RetryMax: time.Second}, "above retry_max"},
		{"negative", Config{PublicURL: public, Webhooks: []Webhook{ok}, MaxAge: -1}, "negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg, Deps{Bus: &bus.Bus{}, Address: addressOf})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name string
		cfg  Config
		d    Deps
		want string
	}{
		{"no bus", Config{PublicURL: public, Webhooks: []Webhook{ok}}, Deps{}, "no bus"},
		{"email without address", mail(func(*Email) {}), Deps{Bus: &bus.Bus{}}, "Deps.Address"},
		{"digest without pending", Config{PublicURL: public, Webhooks: []Webhook{ok}, Digest: time.Minute}, Deps{Bus: &bus.Bus{}}, "Deps.Pending"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(c.cfg, c.d); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
	if _, err := New(with(func(w *Webhook) { w.URL = "http://127.0.0.1:8080/hook" }), Deps{Bus: &bus.Bus{}}); err != nil {
		t.Fatalf("loopback http: %v", err)
	}
}

// TestHandleFailures: a person whose address cannot be read is retried
// with nothing sent; a digest whose item list fails likewise; an item
// without a creation time is malformed for good.
func TestHandleFailures(t *testing.T) {
	r := newRig(t)
	sink := newSMTPSink(t, true)
	n := r.notifier(Config{Email: emailConfig(sink)}, Deps{})
	d := r.publish(request("p_gone", "i1", time.Now()))
	if err := n.Handle(context.Background(), d); err == nil || !strings.Contains(err.Error(), "address of person p_gone") {
		t.Fatalf("unknown person: %v", err)
	}
	if len(sink.got()) != 0 || len(r.attempts("p_gone", "i1", ChannelEmail)) != 0 {
		t.Fatal("sent without an address")
	}

	n = r.notifier(Config{Email: emailConfig(sink), Digest: time.Millisecond}, Deps{
		Pending: func(context.Context, string, string) ([]items.Item, error) { return nil, errors.New("store not open") }})
	d = r.publish(request(lee, "i2", time.Now().Add(-time.Second)))
	if err := n.Handle(context.Background(), d); err == nil || !strings.Contains(err.Error(), "store not open") {
		t.Fatalf("pending failed: %v", err)
	}
	if len(sink.got()) != 0 {
		t.Fatal("a digest went out without its list")
	}

	ev := request(lee, "i3", time.Now())
	ev.GetApprovalRequested().Created = nil
	if err := n.Handle(context.Background(), bus.Delivery{Event: ev}); !bus.IsPermanent(err) {
		t.Fatalf("no creation time: %v", err)
	}
}
