package discovery

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/alp"
)

// FuzzCacheControl: a remote's Cache-Control header never panics the
// parser nor yields a negative lifetime.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"public, max-age=600", "no-store", "max-age=\"60\"", "max-age=99999999999999999999", "max-age=-1", ",,=,", "MAX-AGE=5, no-cache"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{}
		h.Set("Cache-Control", s)
		d, ok := cacheControlMaxAge(h)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("%q: %v %v", s, d, ok)
		}
		if ok && !strings.Contains(strings.ToLower(s), "max-age") && !strings.Contains(strings.ToLower(s), "no-") {
			t.Fatalf("%q: a lifetime from nothing", s)
		}
		_ = time.Duration(d)
	})
}

// FuzzRequestHost: whatever the Host header, the tenant looked up is
// lower case without a port.
func FuzzRequestHost(f *testing.F) {
	for _, s := range []string{"a.example", "A.Example:8443", "[::1]:80", "a.example.", ":", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := requestHost(s)
		if h != strings.ToLower(h) {
			t.Fatalf("%q → %q: not lower case", s, h)
		}
		if alp.ValidateTenant(h) == nil && !strings.Contains(strings.ToLower(s), h) {
			t.Fatalf("%q → tenant %q it does not name", s, h)
		}
	})
}
