package nlipapi_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/accesstoken"
)

// TestEnvelopeIDMustBeUUID is issue 10 finding 1: an envelope id of about
// 4,000 characters from a read-only agent used to become a NATS subject
// unchecked; nats-server refused the protocol line and the client closed
// the broker's connection for good. Ids from outside are parsed as UUIDs
// first: a bad one is a 400 with a code, and the broker stays ready, its
// NATS connection open and its services working.
func TestEnvelopeIDMustBeUUID(t *testing.T) {
	r := newRig(t, rigOptions{})
	readOnly := r.mint(t, "agent-ro", accesstoken.ClassConsumer, "alp.read")
	poll := func(id string) (*http.Response, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, r.srv.URL+"/nlip/envelopes/"+url.PathEscape(id), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+readOnly)
		resp, reply := r.do(t, req)
		if resp.StatusCode >= 400 {
			return resp, apiError(t, reply)
		}
		return resp, result(t, reply)
	}

	for _, tc := range []struct{ name, id string }{
		{"4000 characters", strings.Repeat("a", 4000)},
		{"4000 characters that are UUIDs", strings.Repeat("01900000-0000-7000-8000-000000000000", 111)},
		{"subject separator", "01900000-0000-7000-8000-000000000000.x"},
		{"wildcard", "*"},
		{"full wildcard", ">"},
		{"space", "01900000 0000 7000 8000 000000000000"},
		{"braces", "{01900000-0000-7000-8000-000000000000}"},
		{"urn form", "urn:uuid:01900000-0000-7000-8000-000000000000"},
		{"no dashes", "01900000000070008000000000000000"},
		{"not hex", "0190000g-0000-7000-8000-000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, e := poll(tc.id)
			if resp.StatusCode != http.StatusBadRequest || e["code"] != "invalid_envelope_id" {
				t.Fatalf("GET /nlip/envelopes/<%s>: %d %v; want 400 invalid_envelope_id", tc.name, resp.StatusCode, e)
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, "UUID") || len(msg) > 200 {
				t.Errorf("message %q: want a short one that says an id is a UUID (and does not echo the id)", msg)
			}
		})
	}

	// The broker survived: its connection is open, every service is
	// ready, /healthz and /readyz answer 200, and an agent still gets an
	// answer that needs NATS (an unknown envelope is looked up, not
	// refused).
	if r.br.NC.IsClosed() || !r.br.NC.IsConnected() {
		t.Fatalf("NATS connection %s after the requests (last error %v)", r.br.NC.Status(), r.br.NC.LastError())
	}
	if err := r.b.Ready(); err != nil {
		t.Fatalf("broker not ready after the requests: %v", err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(r.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s after the requests: %d, want 200", path, resp.StatusCode)
		}
	}
	// Upper case is the same UUID (RFC 9562 §4: compared case-insensitively).
	for _, id := range []string{"01900000-0000-7000-8000-000000000000", "01900000-0000-7000-8000-00000000000A"} {
		if resp, e := poll(id); resp.StatusCode != http.StatusNotFound || e["code"] != "unknown_envelope" {
			t.Errorf("GET /nlip/envelopes/%s: %d %v; want 404 unknown_envelope", id, resp.StatusCode, e)
		}
	}
	resp, reply := r.post(t, "/nlip/", r.token, "application/json", sendJSON("bo@other.example"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("send after the requests: %d %+v", resp.StatusCode, reply)
	}
	id := result(t, reply)["envelope_id"].(string)
	if resp, res := poll(strings.ToUpper(id)); resp.StatusCode != http.StatusOK || res["envelope_id"] != id || res["outcome"] != "refuse" {
		t.Errorf("poll of the sent envelope (upper case id): %d %v; want 200, its canonical id, refuse", resp.StatusCode, res)
	}
}
