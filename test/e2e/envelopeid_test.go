package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// webSession is a person signed in at the test IdP (alpdtest.Session,
// under the names these tests have always used) on a plain-http broker at
// addr.
type webSession struct {
	*alpdtest.Session
	addr, tenant string
	client       *http.Client
	csrf         string
	personID     string
}

// signIn signs username in to tenant at the broker's test IdP.
func signIn(t *testing.T, addr, tenant, username string) *webSession {
	t.Helper()
	s := alpdtest.SignIn(t, &http.Client{Timeout: 10 * time.Second}, "http://"+addr, tenant, username)
	return &webSession{Session: s, addr: addr, tenant: tenant, client: s.Client, csrf: s.CSRF, personID: s.PersonID}
}

// do sends a request of the signed-in person's browser (same origin, with
// the CSRF token) and returns the status and the body.
func (s *webSession) do(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	return s.Do(t, method, path, body)
}

// pat mints the person a personal access token with scopes, and waits
// until ingress knows it.
func (s *webSession) pat(t *testing.T, scopes ...string) string {
	t.Helper()
	return s.patNamed(t, "e2e", scopes...)
}

// patNamed is pat for an agent of that name: the name is the one the
// sender line gives the agent ("from your own agent muse …").
func (s *webSession) patNamed(t *testing.T, name string, scopes ...string) string {
	t.Helper()
	return s.PAT(t, name, scopes...)
}

// signInAgent signs username in to the test tenant and mints their agent a
// personal access token with scopes.
func signInAgent(t *testing.T, addr, username string, scopes ...string) (pat, personID string) {
	t.Helper()
	s := signIn(t, addr, splitTenant, username)
	return s.pat(t, scopes...), s.personID
}

// pollEnvelope is GET /nlip/envelopes/{id} at addr with a bearer token; it
// returns the status and the alp.error code ("" when there is none).
func pollEnvelope(t *testing.T, addr, id, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/nlip/envelopes/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET /nlip/envelopes/…: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Code string `json:"code"`
	}
	if c, ok := submessage(body, "alp.error"); ok && json.Unmarshal(c, &e) == nil {
		return resp.StatusCode, e.Code
	}
	return resp.StatusCode, ""
}

// submessage is the content of the first submessage labeled label in the
// JSON NLIP message body; false when there is none (or body is not one).
func submessage(body []byte, label string) (json.RawMessage, bool) {
	var m struct {
		Submessages []struct {
			Label   string          `json:"label"`
			Content json.RawMessage `json:"content"`
		} `json:"submessages"`
	}
	if json.Unmarshal(body, &m) != nil {
		return nil, false
	}
	for _, sm := range m.Submessages {
		if sm.Label == label {
			return sm.Content, true
		}
	}
	return nil, false
}

// checkHostileEnvelopeID is issue 10 finding 1 against a real process:
// with a read-only PAT, GET /nlip/envelopes/<about 4,000 characters> on
// the process at ingressAddr used to make nats-server close that
// process's NATS connection for good (/readyz 503 from then on, /healthz
// still 200). It must be a 400 invalid_envelope_id, and the process must
// stay ready, alive and able to look envelopes up. p is the process
// serving ingressAddr.
func checkHostileEnvelopeID(t *testing.T, p *proc, ingressAddr, pat string) {
	t.Helper()
	const unknown = "0192f0c4-7b1e-7a00-8000-000000000001"
	// The PAT was minted by identity; wait until this process's identity
	// projection knows it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, code := pollEnvelope(t, ingressAddr, unknown, pat)
		if status == http.StatusNotFound && code == "unknown_envelope" {
			break
		}
		if status != http.StatusUnauthorized || time.Now().After(deadline) {
			t.Fatalf("GET /nlip/envelopes/%s with a fresh read-only PAT: %d %q; want 404 unknown_envelope", unknown, status, code)
		}
		time.Sleep(100 * time.Millisecond)
	}

	for _, id := range []string{strings.Repeat("a", 4000), strings.Repeat("0", 3900) + "-*>", "a.b"} {
		status, code := pollEnvelope(t, ingressAddr, id, pat)
		if status != http.StatusBadRequest || code != "invalid_envelope_id" {
			t.Errorf("GET /nlip/envelopes/<%d characters>: %d %q; want 400 invalid_envelope_id", len(id), status, code)
		}
	}

	if p.exited() {
		t.Fatalf("%s exited (code %d) after the hostile ids", p.name, p.cmd.ProcessState.ExitCode())
	}
	for _, path := range []string{"/readyz", "/healthz"} {
		status, body, err := get("http://" + ingressAddr + path)
		if err != nil || status != http.StatusOK {
			t.Errorf("GET %s after the hostile ids: %d %s %v; want 200", path, status, body, err)
		}
	}
	if status, code := pollEnvelope(t, ingressAddr, unknown, pat); status != http.StatusNotFound || code != "unknown_envelope" {
		t.Errorf("GET /nlip/envelopes/%s after the hostile ids: %d %q; want 404 unknown_envelope (NATS still answering)", unknown, status, code)
	}
	if t.Failed() {
		msgs := p.logMessages()
		t.Logf("%s logged: %s", p.name, fmt.Sprint(msgs[max(0, len(msgs)-10):]))
	}
}
