package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/approvals/notify"
)

// mailSink is a real SMTP server (go-smtp) offering STARTTLS and AUTH
// PLAIN, keeping every message it receives.
type mailSink struct {
	addr, caFile string
	mu           sync.Mutex
	mails        []string
}

type mailSession struct {
	sink *mailSink
	conn *smtp.Conn
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "alpd" || pass != "relay-pw" {
			return errors.New("bad credentials")
		}
		return nil
	}), nil
}
func (s *mailSession) Mail(string, *smtp.MailOptions) error { return nil }
func (s *mailSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if _, ok := s.conn.TLSConnectionState(); !ok {
		return errors.New("the message came without TLS")
	}
	s.sink.mu.Lock()
	s.sink.mails = append(s.sink.mails, string(b))
	s.sink.mu.Unlock()
	return nil
}
func (s *mailSession) Reset()        {}
func (s *mailSession) Logout() error { return nil }

func (m *mailSink) received() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.mails...)
}

// startMailSink starts the relay on 127.0.0.1 with a certificate made
// here, whose PEM is written to caFile for alpd to trust.
func startMailSink(t *testing.T) *mailSink {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sink := &mailSink{caFile: filepath.Join(t.TempDir(), "relay-ca.pem")}
	if err := os.WriteFile(sink.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) { return &mailSession{sink: sink, conn: c}, nil }))
	srv.Domain, srv.ReadTimeout, srv.WriteTimeout = "relay.test", 10*time.Second, 10*time.Second
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink.addr = l.Addr().String()
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sink
}

// TestApprovalsNotify is issue 15's notifications against the real alpd:
// when a confidential field is held for lee, a real SMTP relay receives an
// email over STARTTLS with the link to the item and its binding code and
// none of the held values, and a webhook receiver that is down for its
// first two calls verifies the signature of the notification it gets after
// the broker's retries. The test endpoint notifies lee on both channels.
func TestApprovalsNotify(t *testing.T) {
	sink := startMailSink(t)
	secret := []byte("whsec-e2e-0123456789abcdef")
	secretFile := filepath.Join(t.TempDir(), "webhook.secret")
	pwFile := filepath.Join(t.TempDir(), "relay.pw")
	for f, b := range map[string][]byte{secretFile: secret, pwFile: []byte("relay-pw\n")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		calls int
		hooks []map[string]any
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 { // down for a while
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		if err := notify.VerifyWebhook(secret, r.Header, body, time.Now(), 5*time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var v map[string]any
		_ = json.Unmarshal(body, &v)
		hooks = append(hooks, v)
	}))
	t.Cleanup(receiver.Close)

	d := newDeliveryBroker(t, nil, map[string]any{"approvals": map[string]any{"notifications": map[string]any{
		"webhooks":  []map[string]any{{"url": receiver.URL, "secret_file": secretFile, "tenant": splitTenant}},
		"email":     map[string]any{"addr": sink.addr, "from": "approvals@" + splitTenant, "username": "alpd", "password_file": pwFile, "ca_file": sink.caFile},
		"retry_min": "200ms", "retry_max": "1s",
	}}})
	addr := d.addr
	d.ana, d.lee = signIn(t, addr, splitTenant, "ana"), signIn(t, addr, splitTenant, "lee")
	d.anaPAT = d.ana.pat(t, "alp.send", "alp.read")
	connectPeople(t, addr, d.anaPAT, "lee@"+splitTenant, d.lee)
	desk := companyAgent(t, d.ana, d.ana, "desk", "alp.read", "alp.send")
	d.lee.patNamed(t, "muse", "alp.read", "alp.send")

	const videoURL = "https://video.example/secret-room-4711"
	meeting := `{"subject":"Q4 plan","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@` + splitTenant +
		`"],"location":{"kind":"video","url":"` + videoURL + `"}}`
	var held approvalItem
	testkit.Eventually(t, 30*time.Second, func() error {
		req := sendTyped(t, addr, desk, "lee@"+splitTenant, "meeting.request/v1", meeting)
		var err error
		held, err = heldFor(t, d.lee, req.EnvelopeID, "confidential_fields")
		return err
	}, "a held confidential field")
	link := "http://" + addr + "/approvals/items/" + held.ID

	testkit.Eventually(t, 30*time.Second, func() error {
		for _, m := range sink.received() {
			if strings.Contains(m, held.ID) {
				if !strings.Contains(m, held.BindingCode) || !strings.Contains(strings.ReplaceAll(m, "=\r\n", ""), link) {
					return fmt.Errorf("the email lacks the link %s or the code %s:\n%s", link, held.BindingCode, m)
				}
				if strings.Contains(m, "secret-room-4711") {
					t.Fatalf("the email holds the held value:\n%s", m)
				}
				return nil
			}
		}
		return fmt.Errorf("no email about %s among %d", held.ID, len(sink.received()))
	}, "the email")

	testkit.Eventually(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range hooks {
			if h["item_id"] == held.ID {
				if h["binding_code"] != held.BindingCode || h["link"] != link {
					return fmt.Errorf("webhook %v", h)
				}
				raw, _ := json.Marshal(h)
				if strings.Contains(string(raw), "secret-room-4711") {
					t.Fatalf("the webhook holds the held value: %s", raw)
				}
				return nil
			}
		}
		return fmt.Errorf("no verified webhook about %s after %d calls", held.ID, calls)
	}, "the webhook after retries")

	status, raw := d.lee.do(t, http.MethodPost, "/v1/approvals/notifications/test", nil)
	if status != http.StatusOK || !strings.Contains(string(raw), `"webhook"`) || !strings.Contains(string(raw), `"email"`) {
		t.Fatalf("the test notification: %d %s", status, raw)
	}
}
