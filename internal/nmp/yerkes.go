package nmp

// Performance is the Yerkes-Dodson curve of the NMP README,
// P(u) = 4u(1−u), in thousandths: P(300) = 840, P(500) = 1000, P(700) = 840,
// P(0) = P(1000) = 0. It is computed in integers as 4u(1000−u)/1000 rounded
// to the nearest thousandth, ties to even (the same rounding as ParseMilli);
// P(125) = 437.5 → 438. Urgency outside [0, 1000] is clamped first, so the
// result is always in [0, 1000].
//
// The curve is why high urgency streamlines instead of intensifying: past
// the peak, more arousal lowers performance.
func Performance(urgency Milli) Milli {
	u := int64(min(max(urgency, 0), 1000))
	p := 4 * u * (1000 - u)
	q, r := p/1000, p%1000
	if r > 500 || (r == 500 && q%2 == 1) {
		q++
	}
	return Milli(q)
}

// OptimalBand is the README's optimal urgency range, 0.3–0.7 inclusive;
// inside it P(u) >= 0.84.
func OptimalBand() (lo, hi Milli) { return 300, 700 }

// InOptimalBand reports whether urgency is within OptimalBand.
func InOptimalBand(urgency Milli) bool {
	lo, hi := OptimalBand()
	return urgency >= lo && urgency <= hi
}
