package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testkit"
)

// webSession is a person signed in at the test IdP: their browser (a
// cookie jar) and the session's CSRF token.
type webSession struct {
	addr, tenant string
	client       *http.Client
	csrf         string
	personID     string
}

// signIn signs username in to tenant at the broker's test IdP.
func signIn(t *testing.T, addr, tenant, username string) *webSession {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/signin?tenant=" + tenant + "&login_hint=" + username + "&return=/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/healthz" {
		t.Fatalf("sign-in of %s ended at %s with %d", username, resp.Request.URL, resp.StatusCode)
	}
	resp, err = c.Get("http://" + addr + "/signin/session")
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		CSRF     string `json:"csrf"`
		PersonID string `json:"person_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	if err != nil || sess.CSRF == "" || sess.PersonID == "" {
		t.Fatalf("session of %s: %v %+v", username, err, sess)
	}
	return &webSession{addr: addr, tenant: tenant, client: c, csrf: sess.CSRF, personID: sess.PersonID}
}

// do sends a request of the signed-in person's browser (same origin, with
// the CSRF token) and returns the status and the body.
func (s *webSession) do(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+s.addr+path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Origin", "http://"+s.addr)
	req.Header.Set("X-CSRF-Token", s.csrf)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// pat mints the person a personal access token with scopes, and waits
// until ingress knows it.
func (s *webSession) pat(t *testing.T, scopes ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": "e2e", "scopes": scopes})
	status, raw := s.do(t, http.MethodPost, "/v1/pats", body)
	var minted struct {
		Token string `json:"token"`
	}
	if status != http.StatusCreated || json.Unmarshal(raw, &minted) != nil || !strings.HasPrefix(minted.Token, "alppat_") {
		t.Fatalf("PAT for %s: %d %s", s.personID, status, raw)
	}
	// Ingress learns of the PAT from identity's stream a moment later:
	// wait until it knows the token (an unknown envelope is then 404, not
	// 401), as an agent would retry its first request.
	testkit.Eventually(t, 10*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/nlip/envelopes/00000000-0000-4000-8000-000000000000", nil)
		req.Header.Set("Authorization", "Bearer "+minted.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("ingress does not know %s's PAT yet", s.personID)
		}
		return nil
	})
	return minted.Token
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
