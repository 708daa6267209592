package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSignInWithTestIdP runs alpd all-in-one with the in-process test IdP
// and signs a person in the way a browser does: /signin → IdP → callback →
// a sealed session cookie on the broker.
func TestSignInWithTestIdP(t *testing.T) {
	b := binaries(t)
	addr := freeAddr(t)
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": "ana", "password": "ana-pw", "roles": []string{"alp.admin"}}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv("ALPD_TENANTS=example.org"),
		"--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/signin?tenant=example.org&login_hint=ana&return=/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/healthz" {
		t.Fatalf("sign-in ended at %s with %d", resp.Request.URL, resp.StatusCode)
	}
	u, _ := url.Parse("http://" + addr + "/")
	var session *http.Cookie
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "alpd_session" {
			session = ck
		}
	}
	if session == nil || session.Value == "" {
		t.Fatalf("no session cookie after sign-in; log:\n%s", strings.Join(p.logMessages(), "\n"))
	}
	// The signed-in person makes a personal access token (session + CSRF).
	resp, err = c.Get("http://" + addr + "/signin/session")
	if err != nil {
		t.Fatal(err)
	}
	var sess struct {
		Address string `json:"address"`
		CSRF    string `json:"csrf"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sess); err != nil || sess.Address != "ana@example.org" || sess.CSRF == "" {
		t.Fatalf("session: %v %+v", err, sess)
	}
	resp.Body.Close()
	post := func(path string, body string, csrf bool) (*http.Response, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://"+addr)
		if csrf {
			req.Header.Set("X-CSRF-Token", sess.CSRF)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp, out
	}
	if resp, _ := post("/v1/pats", `{"name":"cli","scopes":["alp.read"]}`, false); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("PAT without CSRF: %d", resp.StatusCode)
	}
	resp, out := post("/v1/pats", `{"name":"cli","scopes":["alp.read"]}`, true)
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(fmt.Sprint(out["token"]), "alppat_") {
		t.Fatalf("PAT: %d %v", resp.StatusCode, out)
	}
	// Issue 10 finding 1, all-in-one (the embedded NATS, in process): the
	// read-only PAT and an envelope id of about 4,000 characters.
	checkHostileEnvelopeID(t, p, addr, fmt.Sprint(out["token"]))
	// A consumer agent registers itself (RFC 7591).
	resp, out = post("/oauth/example.org/register", `{"client_name":"agent","redirect_uris":["http://127.0.0.1:9999/cb"]}`, false)
	if resp.StatusCode != http.StatusCreated || out["client_id"] == "" {
		t.Fatalf("DCR: %d %v", resp.StatusCode, out)
	}

	// An unknown tenant is a clear error, not a redirect.
	resp, err = http.Get("http://" + addr + "/signin?tenant=other.example")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Fatalf("unknown tenant: %d", resp.StatusCode)
	}
	p.stop(t)
}

// TestTestIdPRefusedOnPublicAddress: the test IdP accepts the passwords in
// the configuration, so alpd refuses it on a non-loopback address.
func TestTestIdPRefusedOnPublicAddress(t *testing.T) {
	b := binaries(t)
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true, "listen": "0.0.0.0:0",
			"users": []map[string]any{{"username": "ana", "password": "pw"}},
		}},
	})
	res := runTool(t, b.alpd, hermeticEnv("ALPD_TENANTS=example.org"), "--config", configFile, "--data-dir", t.TempDir(),
		"--http-addr", freeAddr(t))
	if res.code != 2 || !strings.Contains(res.stderr, "identity.test_idp.listen") {
		t.Fatalf("exit %d, stderr:\n%s", res.code, res.stderr)
	}
}
