package dlp

import (
	"strings"
	"testing"
	"time"
)

// TestLinear scans 200 kB made of one detector's trigger repeated: a scan
// that went quadratic somewhere (a walk to the end of the text from every
// trigger, pairwise overlap checks) takes many seconds here, a linear one
// a fraction of one. Scan is meant for 280 characters, but it must not be
// the thing that breaks on a bigger input.
func TestLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("timing")
	}
	for _, unit := range []string{"password=", "token=ab", "a@", "4111 ", "DE89 ", "USD 1 ", "$1 ", "(415) ",
		"+1 ", "eyJa.", "-----BEGIN PRIVATE KEY-----", "1.", "é"} {
		s := strings.Repeat(unit, 200000/len(unit))
		start := time.Now()
		scan(s)
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("200 kB of %q took %v", unit, d)
		}
	}
}
