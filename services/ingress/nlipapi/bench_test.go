package nlipapi_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
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
	r := newRig(b, rigOptions{door: ingress.DoorConfig{PerAgent: unlimited, PerPerson: unlimited, PerTenant: unlimited}})
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

// BenchmarkSendToPush is same-broker delivery as the agents see it, at
// light load: ana's agent sends a note to lee over NLIP HTTP (credential,
// the body checked, SendRequested, both sides' policy, the recipient's
// inbox) and lee's agent, listening on the CBOR WebSocket, has the item
// pushed. The latency runs from the send's request to the push's arrival.
// Each iteration also times one loopback HTTP echo of the same body, so
// the ratios compare the two in the same run, on the same machine:
//
//	go test -run '^$' -bench SendToPush -benchtime 300x ./services/ingress/nlipapi/
func BenchmarkSendToPush(b *testing.B) {
	r := newDeliveryRig(b, rigOptions{})
	c, _, err := dialURL(b, r.srv.URL, "/nlip/ws", r.claude.Token, "")
	if err != nil {
		b.Fatal(err)
	}
	frames := keepReading(c)
	msg := note("status: all green")
	// The connection has reached policy once the first is delivered.
	pushedOf := func(id string) time.Time {
		for {
			select {
			case f := <-frames:
				if f.err != nil {
					b.Fatalf("WebSocket: %v", f.err)
				}
				if pushedID(b, f.m) == id {
					return f.at
				}
			case <-time.After(10 * time.Second):
				b.Fatalf("item %s was not pushed", id)
			}
		}
	}
	pushedOf(r.deliver(b, r.dot, msg))

	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	defer echo.Close()
	client := &http.Client{}
	roundTrip := func(url, token string) []byte {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %v", url, resp.StatusCode, err)
		}
		return data
	}

	var sendPush, sends, echoes []time.Duration
	for b.Loop() {
		start := time.Now()
		roundTrip(echo.URL+"/nlip/", "")
		echoes = append(echoes, time.Since(start))

		start = time.Now()
		answer, err := nlip.DecodeJSON(roundTrip(r.srv.URL+"/nlip/", r.dot.Token), nlip.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		sends = append(sends, time.Since(start))
		id, _ := result(b, answer)["envelope_id"].(string)
		sendPush = append(sendPush, pushedOf(id).Sub(start))
	}
	p50, p99 := percentile(sendPush, 50), percentile(sendPush, 99)
	e50, e99 := percentile(echoes, 50), percentile(echoes, 99)
	b.ReportMetric(float64(p50.Microseconds()), "push-p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "push-p99-µs")
	// The send's own answer (policy's decision), for where the time goes.
	b.ReportMetric(float64(percentile(sends, 50).Microseconds()), "send-p50-µs")
	b.ReportMetric(float64(e50.Microseconds()), "echo-p50-µs")
	b.ReportMetric(float64(e99.Microseconds()), "echo-p99-µs")
	b.ReportMetric(float64(p50)/float64(e50), "p50-x-echo")
	b.ReportMetric(float64(p99)/float64(e99), "p99-x-echo")
}

// percentile is the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}
