package federation_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/streams"
)

// TestHarnessBrokersUp: three brokers up on their own loopback addresses,
// each answering /healthz over HTTPS at each of its names (through the
// resolve map) with a certificate the test CA verifies for that name and
// nothing else; and alpd refusing plain-http federation off loopback, and
// a resolve target off loopback, at start.
func TestHarnessBrokersUp(t *testing.T) {
	h := New(t,
		BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Admins: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}},
		BrokerSpec{Name: "broker.c.example", Domains: []string{"c.example", "c2.example"}},
	)
	c := h.Client()
	seen := map[string]bool{}
	for _, b := range h.Brokers {
		if seen[b.IP] {
			t.Errorf("%s shares %s with another broker", b.Name, b.IP)
		}
		seen[b.IP] = true
		for _, name := range append([]string{b.Name}, b.Spec.Domains...) {
			url := "https://" + name + ":" + b.Addr[strings.LastIndex(b.Addr, ":")+1:] + "/healthz"
			resp, err := c.Get(url)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.TLS == nil || len(resp.TLS.VerifiedChains) == 0 {
				t.Fatalf("GET %s: %d, TLS %v", url, resp.StatusCode, resp.TLS)
			}
			if err := resp.TLS.PeerCertificates[0].VerifyHostname(name); err != nil {
				t.Errorf("%s: %v", url, err)
			}
		}
	}

	// The names are what is verified: broker b's listener does not pass
	// for broker a.
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", b.Addr, &tls.Config{RootCAs: h.Roots, ServerName: a.Name})
	if err == nil {
		conn.Close()
		t.Fatalf("%s's listener passed TLS verification as %s", b.Name, a.Name)
	}
	// People sign in over HTTPS at the broker's name, and their agents
	// get tokens.
	ana := a.SignIn(t, "a.example", "ana")
	if tok := ana.PAT(t, "desk", "alp.read"); !strings.HasPrefix(tok, "alppat_") {
		t.Fatalf("PAT %q", tok)
	}
	// The harness reads each broker's key file (the token key that
	// signed the sign-in's tokens is there) and streams (identity's
	// events of the sign-in and the PAT).
	if keys, err := a.KeyStore(t).Keys(context.Background(), "a.example", alpv1.KeyPurpose_KEY_PURPOSE_TOKEN); err != nil || len(keys) == 0 {
		t.Fatalf("a's token keys: %v %v", keys, err)
	}
	if msgs := a.StreamMessages(t, streams.Identity); len(msgs) == 0 {
		t.Fatalf("a's identity stream is empty after a sign-in and a PAT")
	}

	// Plain-http federation with the dev flag, off loopback: refused.
	out := h.Refused(t, BrokerSpec{Name: "broker.d.example", Domains: []string{"d.example"}, Config: func(conf map[string]any) {
		httpConf := conf["http"].(map[string]any)
		delete(httpConf, "tls")
		httpConf["public_url"] = "http://broker.d.example:8080"
		conf["federation"].(map[string]any)["allow_plain_http_loopback"] = true
	}})
	if !strings.Contains(out, "federation.allow_plain_http_loopback") || !strings.Contains(out, "not a loopback address") {
		t.Errorf("plain http off loopback: alpd said\n%s", out)
	}
	// Federation settings on a plain-http broker: refused.
	out = h.Refused(t, BrokerSpec{Name: "broker.e.example", Domains: []string{"e.example"}, Config: func(conf map[string]any) {
		httpConf := conf["http"].(map[string]any)
		delete(httpConf, "tls")
		delete(httpConf, "public_url")
	}})
	if !strings.Contains(out, "is plain http, so this broker does not federate") {
		t.Errorf("federation over plain http: alpd said\n%s", out)
	}
	// A resolve target off loopback: refused.
	out = h.Refused(t, BrokerSpec{Name: "broker.f.example", Domains: []string{"f.example"}, Config: func(conf map[string]any) {
		conf["federation"].(map[string]any)["resolve"] = map[string]string{"a.example": "192.0.2.1:443"}
	}})
	if !strings.Contains(out, "federation.resolve.a.example") || !strings.Contains(out, "is not a loopback ip:port") {
		t.Errorf("resolve off loopback: alpd said\n%s", out)
	}
}
