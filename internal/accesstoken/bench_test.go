package accesstoken

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// noAuthFloor is what a request costs ingress when no token is checked:
// reading the Authorization header of a request that has none.
func noAuthFloor(r *http.Request) bool {
	_, ok := BearerToken(r.Header.Get("Authorization"))
	return ok
}

var sinkBool bool

// BenchmarkVerify measures local verification of a valid token (header
// parsing, key lookup in the memory key store, Ed25519 verification, claim
// checks, revocation lookup) and, in the same run, the no-auth floor; it
// reports both and their ratio.
func BenchmarkVerify(b *testing.B) {
	e := newRig(b)
	e.clock.Set(time.Now())
	tok := e.mint(b, baseClaims())
	ctx := context.Background()
	withToken, _ := http.NewRequest(http.MethodPost, resource, nil)
	withToken.Header.Set("Authorization", "Bearer "+tok)
	noToken, _ := http.NewRequest(http.MethodPost, resource, nil)

	b.ReportAllocs()
	n := 0
	for b.Loop() {
		t, ok := BearerToken(withToken.Header.Get("Authorization"))
		if !ok {
			b.Fatal("no token")
		}
		if _, err := e.ver.Verify(ctx, t); err != nil {
			b.Fatal(err)
		}
		n++
	}
	verifyNs := float64(b.Elapsed().Nanoseconds()) / float64(n)
	// The floor is timed by hand after the loop (testing.Benchmark cannot
	// run inside a benchmark), for at least 100ms.
	floorNs := nsPerOp(100*time.Millisecond, func() { sinkBool = noAuthFloor(noToken) })
	b.ReportMetric(floorNs, "no-auth-ns/op")
	b.ReportMetric(verifyNs/floorNs, "x-no-auth")
}

// BenchmarkMint is for reference (minting happens once per token, not per
// request).
func BenchmarkMint(b *testing.B) {
	e := newRig(b)
	e.clock.Set(time.Now())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.iss.Mint(ctx, baseClaims()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParsePAT is for reference: PAT checking is a hash plus a lookup.
func BenchmarkParsePAT(b *testing.B) {
	tok, _, _ := NewPAT()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParsePAT(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// nsPerOp runs f in doubling batches until one batch takes at least min, and
// returns that batch's time per call.
func nsPerOp(min time.Duration, f func()) float64 {
	for n := 1; ; n *= 2 {
		start := time.Now()
		for range n {
			f()
		}
		if el := time.Since(start); el >= min {
			return float64(el.Nanoseconds()) / float64(n)
		}
	}
}
