package dlp

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/alpd-project/alpd/services/policy/freetext"
)

// benchText is 280 characters of business prose with a card, an email, an
// amount and a secret-ish key, so every prefilter passes and most detectors
// run their expressions: the worst ordinary case, not the cheapest.
func benchText() string {
	s := "Hi Bob, following up on the Q3 review: the vendor invoice is EUR 12,400.50 and they want card 4111 1111 1111 1111 on file. " +
		"Ping alice@example.com or call +44 20 7946 0958. The staging token=Zq8wKp3xLm9vRt2yHn5b is rotated weekly; " +
		"meet Thursday 3pm?"
	for utf8.RuneCountInString(s) < 280 {
		s += " ok"
	}
	r := []rune(s)
	return string(r[:280])
}

// floor is the cheapest full pass over the same text: lowercasing it and
// counting its runes, which any scanner must at least do.
func floor(s string) int { return len(strings.ToLower(s)) + utf8.RuneCountInString(s) }

var sink int

func BenchmarkFloor(b *testing.B) {
	s := benchText()
	b.ReportAllocs()
	for b.Loop() {
		sink += floor(s)
	}
}

func BenchmarkScan280(b *testing.B) {
	n := freetext.Normalize(benchText())
	if len(Scan(n)) < 4 {
		b.Fatalf("bench text finds %v", Scan(n))
	}
	b.ReportAllocs()
	for b.Loop() {
		sink += len(Scan(n))
	}
}

func BenchmarkNormalizeAndScan280(b *testing.B) {
	s := benchText()
	b.ReportAllocs()
	for b.Loop() {
		sink += len(Scan(freetext.Normalize(s)))
	}
}
