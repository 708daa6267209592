package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/config"
)

// TestRunStopsWhenNATSClosed (issue 10 finding 1): an all-in-one alpd
// whose in-process NATS connection the client closed for good (as the
// 4000-byte envelope id did: a protocol line the embedded nats-server
// refuses) stops with an error, so cmd/alpd exits non-zero and is
// restarted, instead of serving on with every service dead.
func TestRunStopsWhenNATSClosed(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.Broker.Tenants = []config.Tenant{{Domain: "example.org"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := Complete(ctx, cfg, "", func(string) string { return "" }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + d.HTTPAddr() + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Past the bus's checks, straight on the in-process connection.
	if err := d.nc.Publish("alp."+strings.Repeat("a", 5000), nil); err != nil {
		t.Fatal(err)
	}
	_ = d.nc.Flush()
	select {
	case err := <-runErr:
		if err == nil || !strings.Contains(err.Error(), "NATS connection is closed") || !strings.Contains(err.Error(), "maximum control line") {
			t.Fatalf("Run returned %v; want an error saying the NATS connection is closed, and why", err)
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("Run still serving 30s after the NATS connection closed (status %s)", d.nc.Status())
	}
}
