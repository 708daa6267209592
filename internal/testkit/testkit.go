// Package testkit holds the small helpers the tests of every package share,
// so that each exists once: waiting for a condition (Eventually), a buffer a
// logger and a test may share (LockedBuffer), random keys (RandKey) and a
// started test OpenID provider (StartIdP).
//
// It is for tests only, and imports nothing of alpd but internal/testidp,
// so any package's external tests can use it. Whole-broker rigs live in
// internal/brokertest, which builds on it.
package testkit

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testidp"
)

// Eventually calls f until it returns nil, failing the test with f's last
// error once d has passed. what, if given, names what is awaited in the
// failure. The 20ms between calls keep a busy test cheap without slowing it.
func Eventually(t testing.TB, d time.Duration, f func() error, what ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if len(what) > 0 {
				t.Fatalf("%s: not within %v: %v", strings.Join(what, " "), d, err)
			}
			t.Fatalf("not within %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LockedBuffer is a bytes.Buffer safe for concurrent use: a logger (or a
// child process's output copier) writes while the test reads. The zero
// value is ready.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Records are the JSON log lines (slog's JSON handler) written so far
// whose "msg" is msg, decoded; other lines are skipped.
func (l *LockedBuffer) Records(msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.SplitSeq(l.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// RandKey is 32 random bytes: a fresh AES-256 or HMAC key.
func RandKey() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// StartIdP starts a test OpenID provider with cfg on a loopback port and
// closes it when the test ends.
func StartIdP(t testing.TB, cfg testidp.Config) *testidp.IdP {
	t.Helper()
	idp, err := testidp.New(cfg)
	if err != nil {
		t.Fatalf("testidp.New: %v", err)
	}
	if err := idp.Start(""); err != nil {
		t.Fatalf("testidp.Start: %v", err)
	}
	t.Cleanup(func() { _ = idp.Close() })
	return idp
}
