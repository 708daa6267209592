package dlp

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkLargeInput scans about 20 kB and 200 kB made of one detector's
// trigger repeated. Compare ns/op between the two sizes of a unit: a scan
// that went quadratic somewhere (a walk to the end of the text from every
// trigger, pairwise overlap checks) grows about 100× instead of 10×. Scan
// is meant for 280 characters, but it must not be the thing that breaks on
// a bigger input.
func BenchmarkLargeInput(b *testing.B) {
	for _, unit := range []string{"password=", "token=ab", "a@", "4111 ", "DE89 ", "USD 1 ", "$1 ", "(415) ",
		"+1 ", "eyJa.", "-----BEGIN PRIVATE KEY-----", "1.", "é"} {
		for _, size := range []int{20000, 200000} {
			s := strings.Repeat(unit, size/len(unit))
			b.Run(strconv.Quote(unit)+"/"+strconv.Itoa(size), func(b *testing.B) {
				b.SetBytes(int64(len(s)))
				for b.Loop() {
					scan(s)
				}
			})
		}
	}
}
