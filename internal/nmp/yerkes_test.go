package nmp

import "testing"

func TestPerformance(t *testing.T) {
	for _, c := range []struct{ u, want Milli }{
		{0, 0}, {300, 840}, {500, 1000}, {700, 840}, {1000, 0},
		{250, 750}, {100, 360}, {900, 360},
		{1, 4}, {999, 4}, // 3.996 rounds to 4
		{125, 438}, {875, 438}, // 437.5: half to even
		{-5, 0}, {1200, 0}, // clamped
	} {
		if got := Performance(c.u); got != c.want {
			t.Errorf("Performance(%d) = %d, want %d", c.u, got, c.want)
		}
	}
}

func TestPerformanceShape(t *testing.T) {
	for u := Milli(0); u <= 1000; u++ {
		p := Performance(u)
		if p != Performance(1000-u) {
			t.Fatalf("P(%d) = %d differs from P(%d) = %d", u, p, 1000-u, Performance(1000-u))
		}
		if u > 0 && u <= 500 && p < Performance(u-1) {
			t.Fatalf("P falls between %d and %d", u-1, u)
		}
		// The optimal band is exactly where P >= 0.84.
		if InOptimalBand(u) != (p >= 840) {
			t.Fatalf("u %d: band %v but P %d", u, InOptimalBand(u), p)
		}
	}
	lo, hi := OptimalBand()
	if lo != 300 || hi != 700 {
		t.Fatalf("OptimalBand() = %d, %d", lo, hi)
	}
}
