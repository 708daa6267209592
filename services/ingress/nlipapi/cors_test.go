package nlipapi_test

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

// preflightReq is the OPTIONS request a browser sends before a
// cross-origin call with a bearer token and a JSON body.
func (r *rig) preflightReq(t testing.TB, path, origin, method string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, r.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	req.Header.Set("Access-Control-Request-Method", method)
	req.Header.Set("Access-Control-Request-Headers", "authorization,content-type")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// corsHeaders are the CORS headers of an answer.
func corsHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out[k] = strings.Join(v, ", ")
		}
	}
	return out
}

// TestCORSPreflight: a browser NLIP client on an allowed origin may call
// the HTTP binding (issue 13: OPTIONS /nlip/ was 405); one on another
// origin gets no CORS headers and a clear refusal. Credentials are bearer
// tokens, never cookies: Allow-Credentials is never sent.
func TestCORSPreflight(t *testing.T) {
	r := newRig(t, rigOptions{nlip: nlipapi.Config{AllowedOrigins: []string{"app.example.org", "https://*.partner.example"}}})
	for _, c := range []struct{ path, method string }{
		{"/nlip/", "POST"}, {"/nlip", "POST"}, {"/nlip/envelopes/01900000-0000-7000-8000-000000000000", "GET"},
	} {
		for _, origin := range []string{"https://app.example.org", "http://app.example.org", "https://web.partner.example"} {
			resp := r.preflightReq(t, c.path, origin, c.method)
			h := resp.Header
			if resp.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != origin ||
				!slices.Contains(h.Values("Vary"), "Origin") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), c.method) ||
				h.Get("Access-Control-Max-Age") == "" {
				t.Errorf("%s from %s: %d %v Vary=%v", c.path, origin, resp.StatusCode, corsHeaders(h), h.Values("Vary"))
			}
			for _, want := range []string{"Authorization", "Content-Type", "Idempotency-Key"} {
				if !strings.Contains(h.Get("Access-Control-Allow-Headers"), want) {
					t.Errorf("%s: Allow-Headers %q lacks %s", c.path, h.Get("Access-Control-Allow-Headers"), want)
				}
			}
			if h.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("%s: Allow-Credentials sent", c.path)
			}
		}
		// Another site, or a pattern's scheme not matching: refused with an
		// NLIP error and no CORS header, so the browser makes no call.
		for _, origin := range []string{"https://evil.example", "http://web.partner.example", "null"} {
			resp := r.preflightReq(t, c.path, origin, c.method)
			if resp.StatusCode != http.StatusForbidden || len(corsHeaders(resp.Header)) != 0 {
				t.Errorf("%s from %s: %d %v", c.path, origin, resp.StatusCode, corsHeaders(resp.Header))
			}
			m := readNLIP(t, resp)
			if e := apiError(t, m); e["code"] != "origin_not_allowed" || !strings.Contains(e["message"].(string), "nlip.allowed_origins") {
				t.Errorf("%s from %s: %v", c.path, origin, e)
			}
		}
	}
	// A plain OPTIONS (no Origin: not a browser) says what the route takes.
	if resp := r.preflightReq(t, "/nlip/", "", "POST"); resp.StatusCode != http.StatusNoContent ||
		resp.Header.Get("Allow") != "POST, OPTIONS" || len(corsHeaders(resp.Header)) != 0 {
		t.Errorf("OPTIONS without Origin: %d Allow=%q %v", resp.StatusCode, resp.Header.Get("Allow"), corsHeaders(resp.Header))
	}

	// The calls themselves: an allowed origin may read every answer, the
	// refusals too (a 401's challenge included); another gets no CORS
	// header, so its browser keeps the answer from it.
	for _, c := range []struct {
		name, token string
		status      int
	}{{"sent", r.token, 200}, {"no credential", "", 401}} {
		resp, _ := r.post(t, "/nlip/", c.token, "application/json", sendJSON("bo@other.example"), "Origin", "https://app.example.org")
		h := resp.Header
		if resp.StatusCode != c.status || h.Get("Access-Control-Allow-Origin") != "https://app.example.org" ||
			!strings.Contains(h.Get("Access-Control-Expose-Headers"), "WWW-Authenticate") ||
			!strings.Contains(h.Get("Access-Control-Expose-Headers"), "Retry-After") ||
			!slices.Contains(h.Values("Vary"), "Origin") || h.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s from an allowed origin: %d %v", c.name, resp.StatusCode, corsHeaders(h))
		}
		resp, _ = r.post(t, "/nlip/", c.token, "application/json", sendJSON("bo@other.example"), "Origin", "https://evil.example")
		if resp.StatusCode != c.status || len(corsHeaders(resp.Header)) != 0 {
			t.Errorf("%s from another origin: %d %v", c.name, resp.StatusCode, corsHeaders(resp.Header))
		}
	}

	// Every HTTP route has its preflight; the WebSockets need none (a
	// browser opens them without asking) and check Origin themselves.
	routes := nlipapi.New(r.b.Ingress(), nlipapi.Config{}, nil).Routes()
	for _, rt := range routes {
		if rt.Method != "" || rt.Streaming {
			continue
		}
		twin := rt.Pattern
		if strings.HasSuffix(twin, "/") {
			twin += "{$}"
		}
		if !slices.ContainsFunc(routes, func(o httproute.Route) bool {
			return o.Method == http.MethodOptions && o.Pattern == twin && o.Caller == httproute.Public
		}) {
			t.Errorf("route %s has no public OPTIONS %s", rt.Pattern, twin)
		}
	}
}

func readNLIP(t testing.TB, resp *http.Response) *nlip.Message {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nlip.DecodeJSON(data, nlip.Limits{})
	if err != nil {
		t.Fatalf("answer %q is not NLIP: %v", data, err)
	}
	return m
}
