package nmp

import (
	"reflect"
	"testing"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
)

// FuzzParseAgentHeader: no input panics; every rejection is a bare *Error
// with a known code; every accepted header renders (MarshalJSON) to JSON that
// parses back to an equal header; and Apply of an accepted header never
// raises trust or the limit, nor lowers the running total.
//
// Bounded run: go test -run '^$' -fuzz '^FuzzParseAgentHeader$' -fuzztime 20s ./internal/nmp/
func FuzzParseAgentHeader(f *testing.F) {
	f.Add(readSample(f))
	for _, s := range []string{
		`{}`,
		`{"nmp_message":{}}`,
		`{"trust":{"level":3},"signals":{"urgency":0.5,"quality":0.5,"inhibition":0.0,"activation":0.5,"focus":0.5,"reward":0.0},"budget":{"max_tokens":5000,"tokens_used":0,"system_mode":"standard"},"trace":[{"agent":"router","action":"classified as high-urgency","tokens":42}]}`,
		`{"nmp_message":{"trust":{"level":4}}}`,
		`{"nmp_message":{"trust":{"level":-1}}}`,
		`{"nmp_message":{"budget":{"system_mode":"turbo"}}}`,
		`{"signals":{"urgency":7e-1,"reward":-0.5000001,"focus":1.0004}}`,
		`{"signals":{"urgency":1e999999999}}`,
		`{"signals":{"urgency":NaN}}`,
		`{"budget":{"max_tokens":18446744073709551615,"tokens_used":18446744073709551616}}`,
		`{"trace":[{"agent":"a\u0000"},{"agent":"b"}]}`,
		`{"trust":null,"signals":{"urgency":null},"trace":null}`,
		`{"trust":{"level":0},"trust":{"level":3}}`,
		`{"nmp_message":{"trust":{"level":1}},"trust":{"level":3}}`,
		`{"Signals":{}}`,
		"{\"trace\":[{\"agent\":\"\xff\"}]}",
		`[{"nmp_message":{}}]`,
		`{}{}`,
	} {
		f.Add([]byte(s))
	}
	known := map[string]bool{CodeOutOfRange: true, CodeInvalidTrust: true, CodeInvalidMode: true,
		CodeMalformed: true, CodeUnknownField: true, CodeTooLarge: true}
	current := &nmpv1.NmpHeader{Trust: verified, Budget: &nmpv1.Budget{MaxTokens: 5000, TokensUsed: 100, SystemMode: standard}}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseAgentHeader(data, DefaultLimits())
		if err != nil {
			e, ok := err.(*Error)
			if !ok || !known[e.Code] || e.Message == "" {
				t.Fatalf("rejection %T %v is not a bare *Error with a known code", err, err)
			}
			if h != nil {
				t.Fatal("a header returned with an error")
			}
			return
		}
		out, err := h.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		// Escaping can make the rendering longer than the input.
		back, err := ParseAgentHeader(out, Limits{MaxBytes: 8 * len(out)})
		if err != nil {
			t.Fatalf("rendering does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, h) {
			t.Fatalf("round trip differs:\n%+v\n%+v", h, back)
		}
		res, _ := Apply(current, h, DefaultConfig())
		if Effective(res.Trust) > verified || res.Budget.MaxTokens > 5000 || res.Budget.MaxTokens == 0 || res.Budget.TokensUsed < 100 {
			t.Fatalf("Apply raised something: %v", res)
		}
		if err := Validate(res); err != nil {
			t.Fatal(err)
		}
	})
}
