package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// TestAgentOAuthFlow: a consumer agent registers itself, its person signs in
// at the (test) IdP, and a real OAuth 2.1 client completes code + PKCE S256
// with a resource indicator against the alpd binary; the token is bound to
// the broker and names the consumer class; refresh rotates, reuse revokes.
func TestAgentOAuthFlow(t *testing.T) {
	b := binaries(t)
	addr := freeAddr(t)
	public := "http://" + addr
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": "ana", "password": "ana-pw"}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv("ALPD_TENANTS=example.org"),
		"--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)

	// RFC 9728 → RFC 8414 discovery, as an MCP client does.
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	getJSON(t, public+"/.well-known/oauth-protected-resource", &prm)
	if prm.Resource != public || len(prm.AuthorizationServers) != 1 {
		t.Fatalf("protected resource metadata: %+v", prm)
	}
	issuer := prm.AuthorizationServers[0]
	iu, _ := url.Parse(issuer)
	var md struct {
		Issuer                string   `json:"issuer"`
		AuthorizationEndpoint string   `json:"authorization_endpoint"`
		TokenEndpoint         string   `json:"token_endpoint"`
		RegistrationEndpoint  string   `json:"registration_endpoint"`
		CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
	}
	getJSON(t, public+"/.well-known/oauth-authorization-server"+iu.Path, &md)
	if md.Issuer != issuer || len(md.CodeChallengeMethods) != 1 || md.CodeChallengeMethods[0] != "S256" {
		t.Fatalf("AS metadata: %+v", md)
	}

	// Dynamic client registration of a public (consumer) agent.
	redirect := "http://127.0.0.1:9/callback"
	resp, err := http.Post(md.RegistrationEndpoint, "application/json",
		strings.NewReader(`{"client_name":"agent","redirect_uris":["`+redirect+`"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ClientID string `json:"client_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || reg.ClientID == "" {
		t.Fatalf("registration: %d %+v", resp.StatusCode, reg)
	}

	conf := &oauth2.Config{ClientID: reg.ClientID, RedirectURL: redirect, Scopes: []string{"alp.send"},
		Endpoint: oauth2.Endpoint{AuthURL: md.AuthorizationEndpoint, TokenURL: md.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	authURL := conf.AuthCodeURL("st4te", oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("resource", public), oauth2.SetAuthURLParam("login_hint", "ana"))

	// The person's browser: signs in at the IdP, comes back, and is sent to
	// the agent's redirect URI, where we stop.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err = browser.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// A consumer agent needs the person's consent, on their broker's page.
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(resp.Request.URL.Path, "/consent") {
		t.Fatalf("no consent page: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	form := url.Values{"decision": {"allow"}}
	for _, m := range regexp.MustCompile(`name="(csrf|request)" value="([^"]*)"`).FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	req, _ := http.NewRequest(http.MethodPost, resp.Request.URL.String(), strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", public)
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	code := loc.Query().Get("code")
	if resp.StatusCode != http.StatusFound || code == "" || loc.Query().Get("state") != "st4te" || loc.Query().Get("iss") != issuer {
		t.Fatalf("authorize ended with %d at %s", resp.StatusCode, loc)
	}

	ctx := context.Background()
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", public))
	if err != nil {
		t.Fatal(err)
	}
	claims := jwtClaims(t, tok.AccessToken)
	if claims["aud"] != public && !containsAud(claims["aud"], public) {
		t.Fatalf("access token audience %v, want %s", claims["aud"], public)
	}
	if claims["class"] != "consumer" || claims["iss"] != issuer || claims["client_id"] != reg.ClientID {
		t.Fatalf("access token claims %v", claims)
	}
	if ttl := time.Until(tok.Expiry); ttl > 10*time.Minute {
		t.Fatalf("access token lives %s", ttl)
	}
	// The token opens the NLIP door: the agent sends an ALP message.
	send := `{"messagetype":"alp:note/v1","format":"text","subformat":"english","content":"hello",
	 "submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@other.example"},
	 {"label":"alp.body","format":"structured","subformat":"json","content":{"text":"hello"}}]}`
	nreq, _ := http.NewRequest(http.MethodPost, public+"/nlip/", strings.NewReader(send))
	nreq.Header.Set("Content-Type", "application/json")
	nreq.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	nresp, err := http.DefaultClient.Do(nreq)
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(nresp.Body)
	nresp.Body.Close()
	if nresp.StatusCode != http.StatusOK || !strings.Contains(string(reply), `"outcome":"refuse"`) || !strings.Contains(string(reply), `"code":"stranger"`) {
		t.Fatalf("NLIP send with the agent's token: %d %s", nresp.StatusCode, reply)
	}
	// Refresh rotates; the old refresh token is then reuse, which revokes.
	old := tok.RefreshToken
	next, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: old, Expiry: time.Now().Add(-time.Minute)}).Token()
	if err != nil || next.RefreshToken == "" || next.RefreshToken == old {
		t.Fatalf("refresh: %v", err)
	}
	_, err = conf.TokenSource(ctx, &oauth2.Token{RefreshToken: old, Expiry: time.Now().Add(-time.Minute)}).Token()
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "invalid_grant" {
		t.Fatalf("refresh-token reuse: %v", err)
	}
	if _, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: next.RefreshToken, Expiry: time.Now().Add(-time.Minute)}).Token(); err == nil {
		t.Fatal("grant still usable after refresh-token reuse")
	}
	// The code is one-time.
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier), oauth2.SetAuthURLParam("resource", public)); err == nil {
		t.Fatal("code accepted twice")
	}
	p.stop(t)
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

func jwtClaims(t *testing.T, token string) map[string]any { return alpdtest.JWTClaims(t, token) }

func containsAud(aud any, want string) bool {
	list, ok := aud.([]any)
	if !ok {
		return false
	}
	for _, a := range list {
		if a == want {
			return true
		}
	}
	return false
}
