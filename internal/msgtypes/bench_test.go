package msgtypes

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// body30 is a briefing.reply/v1 with 30 fields: three top-level, five
// figures of five (label, amount, period) and the pipeline amount.
func body30(tb testing.TB) (*Type, []byte) {
	var figs []string
	for i := range 5 {
		figs = append(figs, fmt.Sprintf(`{"label":"Figure %d","amount":{"currency":"EUR","value":"%d.50"},`+
			`"period":{"start":"2026-01-01T00:00:00+01:00","end":"2026-03-31T23:59:59+02:00"}}`, i, 1000*i))
	}
	body := `{"in_reply_to":"0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e","as_of":"2026-04-01T09:00:00Z",` +
		`"summary":"Renewal likely; pricing pressure from a competitor.","figures":[` + strings.Join(figs, ",") +
		`],"pipeline":{"currency":"USD","value":"350000"}}`
	typ, ok := newRegistry(tb).Lookup("briefing.reply/v1")
	if !ok {
		tb.Fatal("no briefing.reply/v1")
	}
	fs, err := typ.Check([]byte(body))
	if err != nil || len(fs) != 30 {
		tb.Fatalf("Check = %d fields, %v; want 30", len(fs), err)
	}
	return typ, []byte(body)
}

func BenchmarkValidate30(b *testing.B) {
	typ, body := body30(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := typ.Validate(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFields30(b *testing.B) {
	typ, body := body30(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := typ.Fields(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheck30(b *testing.B) {
	typ, body := body30(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := typ.Check(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatio30 times Validate, Fields and Check in turn on the same
// body in one loop and reports Fields and Check as multiples of Validate
// (the policy issue aims at field decisions within 3× validation).
func BenchmarkRatio30(b *testing.B) {
	typ, body := body30(b)
	var v, f, c time.Duration
	for b.Loop() {
		t0 := time.Now()
		_ = typ.Validate(body)
		t1 := time.Now()
		_, _ = typ.Fields(body)
		t2 := time.Now()
		_, _ = typ.Check(body)
		t3 := time.Now()
		v, f, c = v+t1.Sub(t0), f+t2.Sub(t1), c+t3.Sub(t2)
	}
	b.ReportMetric(float64(v.Nanoseconds())/float64(b.N), "validate-ns")
	b.ReportMetric(float64(f)/float64(v), "fields/validate")
	b.ReportMetric(float64(c)/float64(v), "check/validate")
}
