package discovery

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// domainDocJSON is a DomainDoc as another broker would serve it.
func domainDocJSON(domain, broker, brokerURL string, maxAge int) string {
	return fmt.Sprintf(`{"wire":"alp-wire/v1","domain":%q,"broker":%q,"broker_url":%q,"max_age":%d}`, domain, broker, brokerURL, maxAge)
}

// docServer serves a.example's DomainDoc with the given max_age and
// Cache-Control ("" for none).
func docServer(t *testing.T, ca *testCA, maxAge int, cacheControl string) *server {
	return ca.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != DomainDocPath {
			http.NotFound(w, r)
			return
		}
		if cacheControl != "" {
			w.Header().Set("Cache-Control", cacheControl)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, domainDocJSON("a.example", "broker.a.example", "https://broker.a.example", maxAge))
	}), "a.example")
}

func pinnedConfig(ca *testCA, clk *clock, pins map[string]string) Config {
	return Config{RootCAs: ca.pool, Now: clk.Now, Resolve: pins}
}

// cachedFor checks that a DomainDoc is fetched once and answered from the
// cache until just before ttl, then fetched again.
func cachedFor(t *testing.T, maxAge int, cacheControl string, ttl time.Duration) {
	t.Helper()
	ca, clk := newTestCA(t), newClock()
	s := docServer(t, ca, maxAge, cacheControl)
	r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{"a.example": s.addr()}))
	ctx := context.Background()
	doc, err := r.HomeBroker(ctx, "a.example")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Broker != "broker.a.example" || doc.BrokerURL != "https://broker.a.example" {
		t.Fatalf("doc = %+v", doc)
	}
	clk.Advance(ttl - time.Second)
	if _, err := r.HomeBroker(ctx, "a.example"); err != nil {
		t.Fatal(err)
	}
	if n := s.hits.Load(); n != 1 {
		t.Fatalf("%d fetches within %v, want 1 (cached)", n, ttl)
	}
	clk.Advance(2 * time.Second)
	if _, err := r.HomeBroker(ctx, "a.example"); err != nil {
		t.Fatal(err)
	}
	if n := s.hits.Load(); n != 2 {
		t.Fatalf("%d fetches after %v, want 2 (expired)", n, ttl)
	}
}

func TestHomeBrokerCacheRules(t *testing.T) {
	t.Run("cache-control shorter than max_age wins", func(t *testing.T) { cachedFor(t, 3600, "public, max-age=600", 600*time.Second) })
	t.Run("max_age shorter than cache-control wins", func(t *testing.T) { cachedFor(t, 900, "max-age=3000", 900*time.Second) })
	t.Run("max_age alone", func(t *testing.T) { cachedFor(t, 1200, "", 1200*time.Second) })
	t.Run("cache-control alone (max_age 0)", func(t *testing.T) { cachedFor(t, 0, "max-age=700", 700*time.Second) })
	t.Run("neither: 24h default", func(t *testing.T) { cachedFor(t, 0, "", 24*time.Hour) })
	t.Run("capped at 48h", func(t *testing.T) { cachedFor(t, 10_000_000, "max-age=10000000", 48*time.Hour) })
	t.Run("no-store still cached for 1 min", func(t *testing.T) { cachedFor(t, 3600, "no-store", time.Minute) })
}

func TestHomeBrokerErrorsCachedWithBackoff(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	var mu sync.Mutex
	failing := true
	s := ca.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, domainDocJSON("a.example", "broker.a.example", "https://broker.a.example", 3600))
	}), "a.example")
	r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{"a.example": s.addr()}))
	ctx := context.Background()
	want := int64(0)
	// 1, 2, 4, … minutes, then an hour at most.
	for i, backoff := range []time.Duration{1, 2, 4, 8, 16, 32, 60, 60} {
		backoff *= time.Minute
		_, err := r.HomeBroker(ctx, "a.example")
		want++
		wantCode(t, err, CodeUnreachable)
		if n := s.hits.Load(); n != want {
			t.Fatalf("failure %d: %d fetches, want %d", i+1, n, want)
		}
		clk.Advance(backoff - time.Second)
		_, err = r.HomeBroker(ctx, "a.example")
		wantCode(t, err, CodeUnreachable)
		var de *Error
		if !asErr(err, &de) || !de.RetryAt.Equal(clk.Now().Add(time.Second)) {
			t.Fatalf("failure %d: cached error %v, want RetryAt %v", i+1, err, clk.Now().Add(time.Second))
		}
		if n := s.hits.Load(); n != want {
			t.Fatalf("failure %d: refetched within the %v backoff", i+1, backoff)
		}
		clk.Advance(time.Second)
	}
	mu.Lock()
	failing = false
	mu.Unlock()
	if _, err := r.HomeBroker(ctx, "a.example"); err != nil {
		t.Fatal(err)
	}
	// Success resets the backoff: the next failure is cached a minute again.
	mu.Lock()
	failing = true
	mu.Unlock()
	clk.Advance(time.Hour + time.Second)
	if _, err := r.HomeBroker(ctx, "a.example"); CodeOf(err) != CodeUnreachable {
		t.Fatalf("err = %v", err)
	}
	n := s.hits.Load()
	clk.Advance(time.Minute)
	_, _ = r.HomeBroker(ctx, "a.example")
	if s.hits.Load() != n+1 {
		t.Fatal("after a success, a failure was cached longer than 1 min")
	}
}

func asErr(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

func TestHomeBrokerSingleFlight(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	entered := make(chan struct{}, 100)
	release := make(chan struct{})
	s := ca.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		fmt.Fprint(w, domainDocJSON("a.example", "broker.a.example", "https://broker.a.example", 3600))
	}), "a.example")
	r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{"a.example": s.addr()}))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	lookup := func() {
		defer wg.Done()
		_, err := r.HomeBroker(context.Background(), "a.example")
		errs <- err
	}
	wg.Add(1)
	go lookup()
	<-entered
	for range 19 {
		wg.Add(1)
		go lookup()
	}
	time.Sleep(100 * time.Millisecond) // let them all reach the lookup
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := s.hits.Load(); n != 1 {
		t.Fatalf("%d fetches for 20 concurrent lookups, want 1", n)
	}
}

func TestHomeBrokerRefusesBadDocuments(t *testing.T) {
	for name, body := range map[string]string{
		"another domain":    domainDocJSON("b.example", "broker.a.example", "https://broker.a.example", 60),
		"plain http broker": domainDocJSON("a.example", "broker.a.example", "http://broker.a.example", 60),
		"not json":          `<html>`,
	} {
		t.Run(name, func(t *testing.T) {
			ca, clk := newTestCA(t), newClock()
			s := ca.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, body) }), "a.example")
			r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{"a.example": s.addr()}))
			_, err := r.HomeBroker(context.Background(), "a.example")
			wantCode(t, err, CodeInvalid)
		})
	}
	t.Run("not a domain", func(t *testing.T) {
		r := mustResolver(t, Config{})
		_, err := r.HomeBroker(context.Background(), "a.example/../x")
		wantCode(t, err, CodeInvalid)
	})
}

func TestRedirects(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	evil := docServer(t, ca, 60, "")
	hops := func(n int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var i int
			fmt.Sscanf(r.URL.Query().Get("hop"), "%d", &i)
			if i < n {
				http.Redirect(w, r, fmt.Sprintf("%s?hop=%d", DomainDocPath, i+1), http.StatusFound)
				return
			}
			fmt.Fprint(w, domainDocJSON("a.example", "broker.a.example", "https://broker.a.example", 60))
		}
	}
	cases := []struct {
		name string
		h    http.HandlerFunc
		code string
	}{
		{"3 on the same host followed", hops(3), ""},
		{"4 on the same host refused", hops(4), CodeRedirect},
		{"off the domain refused", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://evil.example"+DomainDocPath, http.StatusFound)
		}, CodeRedirect},
		{"to another port refused", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://a.example:1"+DomainDocPath, http.StatusFound)
		}, CodeRedirect},
		{"to plain http refused", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://a.example"+DomainDocPath, http.StatusFound)
		}, CodeRedirect},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ca.serve(t, c.h, "a.example")
			r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{"a.example": s.addr(), "evil.example": evil.addr()}))
			_, err := r.HomeBroker(context.Background(), "a.example")
			if c.code == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, c.code)
			if evil.hits.Load() != 0 {
				t.Fatal("the redirect target was fetched")
			}
		})
	}
}

func TestLimits(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	big := strings.Repeat(" ", 10<<20) + domainDocJSON("a.example", "broker.a.example", "https://broker.a.example", 60)
	cases := []struct {
		name string
		h    http.HandlerFunc
		code string
	}{
		{"10 MB answer with its length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			fmt.Fprint(w, big)
		}, CodeTooLarge},
		{"10 MB answer chunked", func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i < len(big); i += 1 << 16 {
				_, _ = w.Write([]byte(big[i:min(i+1<<16, len(big))]))
				w.(http.Flusher).Flush()
			}
		}, CodeTooLarge},
		{"10 MB announced, nothing sent", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(10<<20))
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, CodeTooLarge},
		{"slow headers", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, CodeUnreachable},
		{"slow body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(http.StatusOK)
			for range 1000 {
				if _, err := w.Write([]byte(" ")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}, CodeUnreachable},
		{"not found", http.NotFound, CodeUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := ca.serve(t, c.h, "a.example")
			cfg := pinnedConfig(ca, clk, map[string]string{"a.example": s.addr()})
			cfg.HTTPTimeout = 300 * time.Millisecond
			r := mustResolver(t, cfg)
			_, err := r.HomeBroker(context.Background(), "a.example")
			wantCode(t, err, c.code)
		})
	}
}

func TestTLSVerifiesTheOriginalName(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	s := ca.serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, domainDocJSON("a.example", "broker.a.example", "https://broker.a.example", 60))
	}), "other.example", "127.0.0.1")
	r := mustResolver(t, pinnedConfig(ca, clk, map[string]string{"a.example": s.addr()}))
	_, err := r.HomeBroker(context.Background(), "a.example")
	wantCode(t, err, CodeUnreachable)
	if s.hits.Load() != 0 {
		t.Fatal("answered despite a certificate for another name")
	}
	// And an unknown CA is refused too.
	r = mustResolver(t, Config{Now: clk.Now, Resolve: map[string]string{"a.example": s.addr()}})
	_, err = r.HomeBroker(context.Background(), "a.example")
	wantCode(t, err, CodeUnreachable)
}

func TestDialGuard(t *testing.T) {
	ca, clk := newTestCA(t), newClock()
	s := docServer(t, ca, 60, "")
	_, port, _ := strings.Cut(s.addr(), ":")
	ctx := context.Background()
	// "localhost" is a name: only the address it resolves to, at dial
	// time, shows it is loopback.
	for _, url := range []string{"https://127.0.0.1:" + port, "https://localhost:" + port, "https://[::1]:" + port} {
		r := mustResolver(t, Config{RootCAs: ca.pool, Now: clk.Now})
		_, err := r.BrokerKeys(ctx, url, "broker.a.example")
		wantCode(t, err, CodeForbiddenTarget)
	}
	if n := s.hits.Load(); n != 0 {
		t.Fatalf("a loopback target got %d requests without AllowPrivate", n)
	}
	// AllowPrivate (tests) lets it through: the request reaches the server
	// (which then fails the TLS name or the document, not the guard).
	r := mustResolver(t, Config{RootCAs: ca.pool, Now: clk.Now, AllowPrivate: true})
	_, err := r.BrokerKeys(ctx, "https://127.0.0.1:"+port, "broker.a.example")
	if c := CodeOf(err); c == CodeForbiddenTarget {
		t.Fatalf("AllowPrivate: still refused: %v", err)
	}
}

func TestForbiddenAddr(t *testing.T) {
	for _, a := range []string{"10.1.2.3", "172.16.0.1", "192.168.1.1", "127.0.0.1", "127.8.9.10", "169.254.169.254",
		"0.0.0.0", "0.1.2.3", "100.64.0.1", "224.0.0.1", "239.1.2.3", "255.255.255.255", "198.18.0.1",
		"::", "::1", "fe80::1", "fc00::1", "fd12::1", "ff02::1", "ff05::2", "::ffff:10.0.0.1", "::ffff:127.0.0.1",
		"64:ff9b::a00:1", "64:ff9b::7f00:1", "2002:a00:1::", "2001:db8::1", "fec0::1"} {
		if !forbiddenAddr(netip.MustParseAddr(a).Unmap()) {
			t.Errorf("%s allowed", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "2a00:1450::1", "64:ff9b::808:808"} {
		if forbiddenAddr(netip.MustParseAddr(a).Unmap()) {
			t.Errorf("%s refused", a)
		}
	}
}

func TestPlainHTTP(t *testing.T) {
	clk := newClock()
	ctx := context.Background()
	plain := &server{}
	plain.Server = newPlainServer(t, func(w http.ResponseWriter, r *http.Request) {
		plain.hits.Add(1)
		fmt.Fprint(w, domainDocJSON("a.example", "broker.a.example", "http://127.0.0.1:1", 60))
	})
	t.Run("refused without the dev flag", func(t *testing.T) {
		r := mustResolver(t, Config{Now: clk.Now, AllowPrivate: true})
		_, err := r.BrokerKeys(ctx, plain.URL, "broker.a.example")
		wantCode(t, err, CodeForbiddenTarget)
		r = mustResolver(t, Config{Now: clk.Now, AllowPrivate: true, Resolve: map[string]string{"a.example": plain.addr()}})
		_, err = r.HomeBroker(ctx, "a.example") // https to a plain server: fails TLS, never plain
		wantCode(t, err, CodeUnreachable)
	})
	t.Run("refused to a non-loopback host with the dev flag", func(t *testing.T) {
		r := mustResolver(t, Config{Now: clk.Now, AllowPlainHTTPLoopback: true})
		_, err := r.BrokerKeys(ctx, "http://broker.b.example", "broker.b.example")
		wantCode(t, err, CodeForbiddenTarget)
		// A DomainDoc fetched over plain http may not point at a plain
		// http broker elsewhere.
		_, err = r.fetch.checkURL("http://10.0.0.1:8080")
		wantCode(t, err, CodeForbiddenTarget)
	})
	t.Run("allowed to loopback with the dev flag", func(t *testing.T) {
		r := mustResolver(t, Config{Now: clk.Now, AllowPlainHTTPLoopback: true, Resolve: map[string]string{"a.example": plain.addr()}})
		doc, err := r.HomeBroker(ctx, "a.example")
		if err != nil {
			t.Fatal(err)
		}
		if doc.BrokerURL != "http://127.0.0.1:1" {
			t.Fatalf("doc %+v", doc)
		}
	})
	if plain.hits.Load() != 1 {
		t.Fatalf("plain server got %d requests, want 1 (the allowed one)", plain.hits.Load())
	}
}

func TestResolveOverrideMustBeLoopback(t *testing.T) {
	for _, target := range []string{"10.0.0.1:443", "8.8.8.8:443", "a.example:443", "127.0.0.1"} {
		if _, err := New(Config{Resolve: map[string]string{"a.example": target}}); err == nil {
			t.Errorf("Resolve to %s accepted", target)
		}
	}
	if _, err := New(Config{Resolve: map[string]string{"a.example": "[::1]:8443"}}); err != nil {
		t.Error(err)
	}
}
