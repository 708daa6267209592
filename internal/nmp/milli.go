package nmp

import (
	"math"
	"strconv"
)

// Milli is a fixed-point value in thousandths: 700 is 0.7. Signals travel as
// integers so that signed and persisted forms never contain floats and every
// comparison with a threshold is exact.
type Milli int32

// maxExponent bounds the decimal exponent we act on. Any exponent beyond it
// already makes a non-zero value far out of range or round to zero, so
// capping it keeps the arithmetic small without changing any result.
const maxExponent = 1 << 20

// ParseMilli parses decimal text in JSON number syntax
// (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?) into thousandths, working
// on the digits themselves, never through float64: "0.7" is exactly 700.
//
// More than three decimals are rounded to the nearest thousandth, ties to
// even ("0.0005" → 0, "0.0015" → 2), because agents serialise binary floats
// and 0.1+0.2 arrives as "0.30000000000000004": rejecting it would punish a
// harmless representation error, and rounding the decimal text (not a float)
// keeps the result predictable. Exponents are applied exactly ("7e-1" → 700).
// NaN, Infinity, a leading "+" or ".", and leading zeros are not JSON numbers
// and are malformed. A value whose magnitude does not fit in an int32 of
// thousandths is out_of_range. Range checks of a particular signal are
// separate (CheckSignal) and apply to the rounded value.
func ParseMilli(s string) (Milli, error) {
	neg, intPart, frac, exp, ok := splitNumber(s)
	if !ok {
		return 0, newError(CodeMalformed, "", strconv.Quote(clip(s))+" is not a decimal number")
	}
	mant := trimLeadingZeros(intPart + frac)
	if mant == "" {
		return 0, nil
	}
	// value = mant × 10^(exp-len(frac)); in thousandths, shift by 3 more.
	shift := exp - len(frac) + 3
	var n int64
	if shift >= 0 {
		if len(mant)+shift > 10 {
			return 0, outOfInt32(s)
		}
		n = digitsValue(mant)
		for range shift {
			n *= 10
		}
	} else {
		k := len(mant) + shift // digits of mant left of the thousandths point
		if k < 0 {
			return 0, nil // below 0.0005 (first dropped digit is a 0)
		}
		if k > 10 {
			return 0, outOfInt32(s)
		}
		n = digitsValue(mant[:k])
		rest := mant[k:]
		if roundUp(rest, n) {
			n++
		}
	}
	if neg {
		n = -n
	}
	if n > math.MaxInt32 || n < math.MinInt32 {
		return 0, outOfInt32(s)
	}
	return Milli(n), nil
}

// roundUp reports whether dropping the digits rest from a number ending in
// kept rounds it up, rounding half to even.
func roundUp(rest string, kept int64) bool {
	if rest == "" {
		return false
	}
	switch {
	case rest[0] > '5':
		return true
	case rest[0] < '5':
		return false
	}
	for i := 1; i < len(rest); i++ {
		if rest[i] != '0' {
			return true
		}
	}
	return kept%2 == 1
}

func outOfInt32(s string) *Error {
	return newError(CodeOutOfRange, "", strconv.Quote(clip(s))+" is too large in magnitude")
}

// splitNumber checks s against the JSON number grammar and returns its parts.
// The exponent is clamped to ±maxExponent.
func splitNumber(s string) (neg bool, intPart, frac string, exp int, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		neg = true
		i++
	}
	start := i
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false, "", "", 0, false
	}
	intPart = s[start:i]
	if i < len(s) && s[i] == '.' {
		i++
		start = i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false, "", "", 0, false
		}
		frac = s[start:i]
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		expNeg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			expNeg = s[i] == '-'
			i++
		}
		start = i
		for i < len(s) && isDigit(s[i]) {
			if exp < maxExponent {
				exp = exp*10 + int(s[i]-'0')
			}
			i++
		}
		if i == start {
			return false, "", "", 0, false
		}
		exp = min(exp, maxExponent)
		if expNeg {
			exp = -exp
		}
	}
	if i != len(s) {
		return false, "", "", 0, false
	}
	return neg, intPart, frac, exp, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func trimLeadingZeros(d string) string {
	for len(d) > 0 && d[0] == '0' {
		d = d[1:]
	}
	return d
}

// digitsValue is the value of at most 10 decimal digits.
func digitsValue(d string) int64 {
	var n int64
	for i := 0; i < len(d); i++ {
		n = n*10 + int64(d[i]-'0')
	}
	return n
}

// String renders m as the shortest exact decimal with at least one decimal
// place, as the NMP README writes signals: 500 → "0.5", 0 → "0.0",
// -500 → "-0.5", 125 → "0.125". ParseMilli(m.String()) == m for every m.
func (m Milli) String() string {
	v := int64(m)
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	ip, fp := v/1000, v%1000
	if fp == 0 {
		return sign + strconv.FormatInt(ip, 10) + ".0"
	}
	f := []byte{byte('0' + fp/100), byte('0' + fp/10%10), byte('0' + fp%10)}
	for f[len(f)-1] == '0' {
		f = f[:len(f)-1]
	}
	return sign + strconv.FormatInt(ip, 10) + "." + string(f)
}

// clip shortens untrusted text quoted in error messages.
func clip(s string) string {
	const n = 40
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
