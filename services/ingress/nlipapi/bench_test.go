package nlipapi_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

// BenchmarkAuthenticatedSend is one agent's NLIP send over loopback HTTP:
// bearer verification, rate limits, decoding, sealing, the SendRequested
// append and waiting for policy's decision. Compare with
// BenchmarkLoopbackEcho (the same request to a handler that only echoes
// the body) run in the same invocation:
//
//	go test -run '^$' -bench 'AuthenticatedSend|LoopbackEcho' ./services/ingress/nlipapi/
func BenchmarkAuthenticatedSend(b *testing.B) {
	// Rate limits far above what a benchmark can reach: the floor is the
	// work, not the buckets.
	unlimited := ingress.Rate{Limit: 1e9, Burst: 1 << 30}
	r := newRig(b, rigOptions{nlip: nlipapi.Config{PerAgent: unlimited, PerPerson: unlimited, PerTenant: unlimited}})
	body := sendJSON("bo@other.example")
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, r.srv.URL+"/nlip/", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+r.token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkLoopbackEcho is the floor: a bare loopback HTTP round trip of
// the same body.
func BenchmarkLoopbackEcho(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	defer srv.Close()
	body := sendJSON("bo@other.example")
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/nlip/", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
