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

// signInAgent signs username in at addr's test IdP the way a browser does
// and mints the person a personal access token with scopes, for an agent
// of theirs to use. It returns the token and the person's id.
func signInAgent(t *testing.T, addr, username string, scopes ...string) (pat, personID string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/signin?tenant=" + splitTenant + "&login_hint=" + username + "&return=/healthz")
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
	body, _ := json.Marshal(map[string]any{"name": "e2e", "scopes": scopes})
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/pats", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", "http://"+addr)
	req.Header.Set("X-CSRF-Token", sess.CSRF)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var minted struct {
		Token string `json:"token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&minted)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil || !strings.HasPrefix(minted.Token, "alppat_") {
		t.Fatalf("PAT for %s: %d %v", username, resp.StatusCode, err)
	}
	// Ingress learns of the PAT from identity's stream a moment later:
	// wait until it knows the token (an unknown envelope is then 404, not
	// 401), as an agent would retry its first request.
	testkit.Eventually(t, 10*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/nlip/envelopes/00000000-0000-4000-8000-000000000000", nil)
		req.Header.Set("Authorization", "Bearer "+minted.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("ingress does not know %s's PAT yet", username)
		}
		return nil
	})
	return minted.Token, sess.PersonID
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
