package restapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/restapi"
)

// BenchmarkRESTSend is one agent's REST send with a PAT over loopback
// HTTP: credential, rate limits, strict JSON decoding, the body checked
// against its type, sealing, the SendRequested append and waiting for
// policy's decision (a refusal: the two are strangers). Compare with
// BenchmarkLoopbackEcho run in the same invocation:
//
//	go test -run '^$' -bench 'RESTSend|LoopbackEcho' ./services/ingress/restapi/
func BenchmarkRESTSend(b *testing.B) {
	unlimited := ingressRate(1e9, 1<<30)
	r := newRigWith(b, broker.Config{Door: ingress.DoorConfig{PerAgent: unlimited, PerPerson: unlimited, PerTenant: unlimited}})
	// Another broker's person, as NLIP's benchmark sends: policy decides
	// the sender's side only.
	body, _ := json.Marshal(send("bo@other.example"))
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, r.br.Srv.URL+restapi.PathMessages, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+r.anaPAT)
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
	body, _ := json.Marshal(send("bo@example.org"))
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+restapi.PathMessages, bytes.NewReader(body))
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
