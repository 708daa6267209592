package httproute_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/internal/httproute"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

func TestMountRefusesARouteWithoutABodyLimit(t *testing.T) {
	good := httproute.Route{Method: http.MethodPost, Pattern: "/a", Handler: ok, Caller: httproute.Public, BodyLimit: 10}
	cases := []struct {
		name   string
		routes []httproute.Route
		want   string
	}{
		{"no limit", []httproute.Route{{Pattern: "/a", Handler: ok, Caller: httproute.Public}}, "has no body limit"},
		{"GET with a limit", []httproute.Route{{Method: http.MethodGet, Pattern: "/a", Handler: ok, Caller: httproute.Public, BodyLimit: 10}}, "takes no body"},
		{"negative limit", []httproute.Route{{Pattern: "/a", Handler: ok, Caller: httproute.Public, BodyLimit: -5}}, "is negative"},
		{"no handler", []httproute.Route{{Pattern: "/a", Caller: httproute.Public, BodyLimit: httproute.NoBody}}, "no handler"},
		{"no caller", []httproute.Route{{Pattern: "/a", Handler: ok, BodyLimit: httproute.NoBody}}, "unknown caller"},
		{"relative pattern", []httproute.Route{{Pattern: "a", Handler: ok, Caller: httproute.Public, BodyLimit: httproute.NoBody}}, "must be a path"},
		{"twice", []httproute.Route{good, good}, "declared twice"},
		{"conflict", []httproute.Route{
			{Pattern: "/x/{a}/y", Handler: ok, Caller: httproute.Public, BodyLimit: httproute.NoBody},
			{Pattern: "/x/z/{b}", Handler: ok, Caller: httproute.Public, BodyLimit: httproute.NoBody},
		}, "conflicts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			err := httproute.Mount(mux, tc.routes)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Mount: %v, want an error with %q", err, tc.want)
			}
			// Nothing was registered: the valid routes of a refused list
			// are not served either.
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/a", nil))
			if rec.Code != http.StatusNotFound {
				t.Errorf("a refused list left routes behind: %d", rec.Code)
			}
		})
	}
	if err := httproute.Mount(http.NewServeMux(), []httproute.Route{good,
		{Method: http.MethodGet, Pattern: "/a", Handler: ok, Caller: httproute.Public, BodyLimit: httproute.NoBody}}); err != nil {
		t.Fatalf("valid routes refused: %v", err)
	}
}

// countingBody counts what the handler side read of a request body.
type countingBody struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
func (c *countingBody) Close() error { return nil }

func TestBodyLimits(t *testing.T) {
	var handled atomic.Int64
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		b, err := io.ReadAll(r.Body)
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "cut", http.StatusBadRequest)
			return
		}
		_, _ = fmt.Fprintf(w, "%d", len(b))
	})
	h := httproute.Handler([]httproute.Route{
		{Method: http.MethodPost, Pattern: "/form", Handler: read, Caller: httproute.Public, BodyLimit: 100},
		{Pattern: "/any", Handler: read, Caller: httproute.Public, BodyLimit: 100},
		{Method: http.MethodGet, Pattern: "/get", Handler: read, Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Pattern: "/none", Handler: read, Caller: httproute.Public, BodyLimit: httproute.NoBody,
			TooLarge: func(w http.ResponseWriter, r *http.Request, limit int64) {
				http.Error(w, fmt.Sprintf("own answer %d", limit), http.StatusRequestEntityTooLarge)
			}},
	})
	do := func(method, path string, body *countingBody, length int64) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		if body != nil {
			req.Body, req.ContentLength = body, length
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	big := func(n int) *countingBody { return &countingBody{r: bytes.NewReader(make([]byte, n))} }

	t.Run("announced too large is refused unread", func(t *testing.T) {
		before := handled.Load()
		b := big(1 << 20)
		rec := do(http.MethodPost, "/form", b, 1<<20)
		var e struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != http.StatusRequestEntityTooLarge || e.Error.Code != httproute.CodeBodyTooLarge || e.Error.Message == "" {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
		if rec.Header().Get("Connection") != "close" {
			t.Errorf("the connection is kept for the unread body")
		}
		if b.n.Load() != 0 || handled.Load() != before {
			t.Errorf("read %d bytes, handler ran %d times", b.n.Load(), handled.Load()-before)
		}
	})
	t.Run("within the limit", func(t *testing.T) {
		if rec := do(http.MethodPost, "/form", big(100), 100); rec.Code != http.StatusOK || rec.Body.String() != "100" {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
	})
	t.Run("chunked is cut at the limit", func(t *testing.T) {
		b := big(1 << 20)
		rec := do(http.MethodPost, "/any", b, -1)
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
		// MaxBytesReader reads one buffer past the limit at most.
		if n := b.n.Load(); n > 100+32<<10 {
			t.Errorf("read %d bytes of a chunked body over a 100-byte limit", n)
		}
	})
	t.Run("GET refuses a body on any route", func(t *testing.T) {
		for _, path := range []string{"/get", "/any"} {
			if rec := do(http.MethodGet, path, big(1), 1); rec.Code != http.StatusRequestEntityTooLarge {
				t.Errorf("GET %s with a body: %d", path, rec.Code)
			}
			if rec := do(http.MethodGet, path, big(1), -1); rec.Code != http.StatusRequestEntityTooLarge {
				t.Errorf("GET %s with a chunked body: %d", path, rec.Code)
			}
			if rec := do(http.MethodGet, path, big(0), -1); rec.Code != http.StatusOK {
				t.Errorf("GET %s with an empty chunked body: %d", path, rec.Code)
			}
			if rec := do(http.MethodGet, path, nil, 0); rec.Code != http.StatusOK {
				t.Errorf("GET %s: %d", path, rec.Code)
			}
		}
	})
	t.Run("NoBody with the route's own answer", func(t *testing.T) {
		rec := do(http.MethodPost, "/none", big(1), 1)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "own answer 0") {
			t.Fatalf("got %d %s", rec.Code, rec.Body)
		}
		if rec := do(http.MethodPost, "/none", nil, 0); rec.Code != http.StatusOK {
			t.Fatalf("POST without a body: %d", rec.Code)
		}
	})
}

// TestAnnouncedOversizeAnsweredBeforeTheBodyIsSent: over a real connection,
// the answer comes while the client has sent only the header, and the
// server closes the connection rather than read on.
func TestAnnouncedOversizeAnsweredBeforeTheBodyIsSent(t *testing.T) {
	srv := httptest.NewServer(httproute.Handler([]httproute.Route{
		{Pattern: "/token", Handler: ok, Caller: httproute.Public, BodyLimit: httproute.FormBody},
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /token HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n", 9<<20)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close {
		t.Fatalf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stays open after refusing its body")
	}
}

// TestHandlerMayOutwaitTheReadTimeout: a handler that waits longer than the
// server's read timeout after reading its body keeps its context. The read
// timeout is meant for slow clients; net/http clears the read deadline once
// the body is read, and the routes rely on that.
func TestHandlerMayOutwaitTheReadTimeout(t *testing.T) {
	wait := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-wait:
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewUnstartedServer(httproute.Handler([]httproute.Route{
		{Pattern: "/wait", Handler: h, Caller: httproute.Public, BodyLimit: 100},
	}))
	srv.Config.ReadTimeout = 100 * time.Millisecond
	srv.Config.WriteTimeout = 10 * time.Second
	srv.Start()
	defer srv.Close()
	for _, body := range []io.Reader{nil, strings.NewReader("a=b")} {
		go func() { time.Sleep(400 * time.Millisecond); wait <- struct{}{} }()
		resp, err := http.Post(srv.URL+"/wait", "text/plain", body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("body %v: the handler's context was cancelled by the read timeout (%d)", body != nil, resp.StatusCode)
		}
	}
}

// TestStreamingWriteDeadlineIsPerWrite: a streaming answer longer than the
// write timeout goes through while the client reads; a client that stops
// reading is dropped.
func TestStreamingWriteDeadlineIsPerWrite(t *testing.T) {
	const timeout = time.Second
	stalled := make(chan error, 1)
	srv := httptest.NewUnstartedServer(httproute.Handler([]httproute.Route{
		{Method: http.MethodGet, Pattern: "/stream", Caller: httproute.Public, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := range 8 {
					fmt.Fprintf(w, "line %d\n", i)
					http.NewResponseController(w).Flush()
					time.Sleep(timeout / 4) // eight lines outlast the timeout twice
				}
			})},
		{Method: http.MethodGet, Pattern: "/flood", Caller: httproute.Public, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				chunk := make([]byte, 64<<10)
				for {
					if _, err := w.Write(chunk); err != nil {
						stalled <- err
						return
					}
				}
			})},
	}))
	srv.Config.WriteTimeout = timeout
	srv.Start()
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.Contains(string(data), "line 7") {
		t.Fatalf("a stream longer than the write timeout broke off: %v, %q", err, data)
	}

	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-stalled:
		t.Logf("the stalled client was dropped: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("a client that reads nothing is never dropped")
	}
}

// TestStreamingHandlerOwnDeadlineStands: a streaming handler that sets its
// own write deadline is not overridden by the progress deadline (which is
// moved at most once a second, so the handler's deadline lies beyond that).
func TestStreamingHandlerOwnDeadlineStands(t *testing.T) {
	failed := make(chan error, 1)
	srv := httptest.NewUnstartedServer(httproute.Handler([]httproute.Route{
		{Method: http.MethodGet, Pattern: "/flood", Caller: httproute.Public, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(3 * time.Second)); err != nil {
					failed <- err
					return
				}
				// Past the progress writer's step, so that a write would
				// move the deadline if it ignored the handler's.
				time.Sleep(1200 * time.Millisecond)
				chunk := make([]byte, 64<<10)
				for {
					if _, err := w.Write(chunk); err != nil {
						failed <- err
						return
					}
				}
			})},
	}))
	srv.Config.WriteTimeout = time.Hour
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-failed:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write failed with %v, want the handler's deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the handler's own deadline was overridden")
	}
}

// TestStreamingRouteHijacks: a WebSocket on a streaming route upgrades
// through the progress writer and outlives the server's write timeout.
func TestStreamingRouteHijacks(t *testing.T) {
	const timeout = 200 * time.Millisecond
	srv := httptest.NewUnstartedServer(httproute.Handler([]httproute.Route{
		{Method: http.MethodGet, Pattern: "/ws", Caller: httproute.Public, BodyLimit: httproute.NoBody, Streaming: true,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				defer c.CloseNow()
				for {
					typ, data, err := c.Read(r.Context())
					if err != nil {
						return
					}
					if err := c.Write(r.Context(), typ, data); err != nil {
						return
					}
				}
			})},
	}))
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = timeout, timeout
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for i := range 3 {
		time.Sleep(2 * timeout)
		msg := fmt.Sprintf("ping %d", i)
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("write after %d timeouts: %v", 2*(i+1), err)
		}
		if _, data, err := c.Read(ctx); err != nil || string(data) != msg {
			t.Fatalf("echo after %d timeouts: %q %v", 2*(i+1), data, err)
		}
	}
}
