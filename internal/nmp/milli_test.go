package nmp

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func TestParseMilli(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Milli
	}{
		{"0.7", 700}, {"0", 0}, {"-0", 0}, {"0.0", 0}, {"1", 1000}, {"1.0", 1000}, {"0.5", 500},
		{"0.125", 125}, {"-0.5", -500}, {"0.05", 50}, {"0.001", 1}, {"-0.001", -1},
		{"0.30000000000000004", 300}, {"0.7000000000000001", 700}, {"0.6999999999999999", 700},
		// more than three decimals: half to even
		{"0.0005", 0}, {"0.0015", 2}, {"0.0025", 2}, {"0.00251", 3}, {"0.0004999", 0},
		{"0.9995", 1000}, {"0.9985", 998}, {"-0.0015", -2}, {"-0.0005", 0}, {"0.00049", 0},
		// exponents are applied exactly
		{"7e-1", 700}, {"7E-1", 700}, {"0.7e0", 700}, {"70e-2", 700}, {"5e2", 500000}, {"1e+0", 1000},
		{"1e-999999999", 0}, {"0e999999999", 0}, {"0.0e-5", 0}, {"1e-4", 0}, {"5e-4", 0}, {"6e-4", 1},
		// extremes of int32 thousandths
		{"2147483.647", math.MaxInt32}, {"-2147483.648", math.MinInt32},
	} {
		got, err := ParseMilli(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseMilli(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestParseMilliErrors(t *testing.T) {
	for _, in := range []string{"", "-", "+1", ".5", "5.", "01", "-01", "00.5", "0x10", "NaN", "nan",
		"Infinity", "-Infinity", "Inf", "1e", "1e+", "1e-", " 1", "1 ", "0.5.5", "1_000", "١", "0,5", "1e5.5", "--1"} {
		_, err := ParseMilli(in)
		wantError(t, err, CodeMalformed, "")
	}
	for _, in := range []string{"2147483.648", "-2147483.649", "1e10", "123456789012345678901234567890", "1e999999999", "-1e7"} {
		_, err := ParseMilli(in)
		wantError(t, err, CodeOutOfRange, "")
	}
}

func TestMilliString(t *testing.T) {
	for _, c := range []struct {
		in   Milli
		want string
	}{
		{0, "0.0"}, {1000, "1.0"}, {500, "0.5"}, {-500, "-0.5"}, {125, "0.125"}, {50, "0.05"},
		{1, "0.001"}, {-1, "-0.001"}, {700, "0.7"}, {1010, "1.01"},
		{math.MaxInt32, "2147483.647"}, {math.MinInt32, "-2147483.648"},
	} {
		if got := c.in.String(); got != c.want {
			t.Errorf("Milli(%d).String() = %q, want %q", int32(c.in), got, c.want)
		}
	}
}

// TestMilliRoundTrip: String is exact, so parsing it gives the same value.
func TestMilliRoundTrip(t *testing.T) {
	check := func(m Milli) {
		got, err := ParseMilli(m.String())
		if err != nil || got != m {
			t.Fatalf("ParseMilli(%q) = %d, %v; want %d", m.String(), got, err, m)
		}
	}
	for m := Milli(-3000); m <= 3000; m++ {
		check(m)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		check(Milli(r.Int32()))
		check(Milli(-r.Int32()))
	}
	check(math.MinInt32)
	check(math.MaxInt32)
}

// TestParseMilliAgainstBigRat compares with exact rational arithmetic and
// round-half-even on random decimal texts.
func TestParseMilliAgainstBigRat(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + r.IntN(10))
		}
		return string(b)
	}
	for range 20000 {
		s := ""
		if r.IntN(2) == 0 {
			s = "-"
		}
		if r.IntN(3) == 0 {
			s += "0"
		} else {
			s += fmt.Sprint(1+r.IntN(9)) + digits(r.IntN(4))
		}
		if r.IntN(4) != 0 {
			s += "." + digits(1+r.IntN(8))
		}
		if r.IntN(4) == 0 {
			s += fmt.Sprintf("e%d", r.IntN(15)-8)
		}
		want, inRange := refMilli(t, s)
		got, err := ParseMilli(s)
		if !inRange {
			if err == nil {
				t.Fatalf("ParseMilli(%q) = %d, want out_of_range", s, got)
			}
			wantError(t, err, CodeOutOfRange, "")
			continue
		}
		if err != nil || got != want {
			t.Fatalf("ParseMilli(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
}

func refMilli(t *testing.T, s string) (Milli, bool) {
	x, ok := new(big.Rat).SetString(s)
	if !ok {
		t.Fatalf("big.Rat cannot parse %q", s)
	}
	x.Mul(x, big.NewRat(1000, 1))
	num, den := new(big.Int).Set(x.Num()), x.Denom()
	neg := num.Sign() < 0
	num.Abs(num)
	q, rem := new(big.Int).QuoRem(num, den, new(big.Int))
	twice := new(big.Int).Mul(rem, big.NewInt(2))
	switch c := twice.Cmp(den); {
	case c > 0, c == 0 && q.Bit(0) == 1:
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	if !q.IsInt64() || q.Int64() > math.MaxInt32 || q.Int64() < math.MinInt32 {
		return 0, false
	}
	return Milli(q.Int64()), true
}

func FuzzParseMilli(f *testing.F) {
	for _, s := range []string{"0.7", "-0.5", "0.0015", "7e-1", "1e999999999", "NaN", "2147483.648"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMilli(s)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %T is not *Error", err)
			}
			return
		}
		if back, err := ParseMilli(m.String()); err != nil || back != m {
			t.Fatalf("%q → %d → %q → %d, %v", s, m, m.String(), back, err)
		}
	})
}
