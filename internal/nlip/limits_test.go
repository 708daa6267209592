package nlip

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

func TestDefaultLimits(t *testing.T) {
	d := DefaultLimits()
	want := Limits{MaxMessageBytes: 1 << 20, MaxSubmessages: 256, MaxContentDepth: 64, MaxContentBytes: 1 << 20, MaxFieldBytes: 1024}
	if d != want {
		t.Fatalf("DefaultLimits() = %+v, want %+v", d, want)
	}
	if got := (Limits{}).withDefaults(); got != d {
		t.Fatalf("zero limits = %+v", got)
	}
	if got := (Limits{MaxSubmessages: -1, MaxFieldBytes: 7}).withDefaults(); got.MaxSubmessages != 256 || got.MaxFieldBytes != 7 {
		t.Fatalf("partial limits = %+v", got)
	}
}

// decodeBoth runs the JSON decoder on data and the CBOR decoder on the
// same message (re-encoded), so each limit is checked in both codecs. A
// message the JSON decoder rejects is built for CBOR by cborOf.
func decodeBoth(t *testing.T, jsonText string, lim Limits) (jsonErr, cborErr error) {
	t.Helper()
	_, jsonErr = DecodeJSON([]byte(jsonText), lim)
	_, cborErr = DecodeCBOR(cborOf(t, jsonText), lim)
	return jsonErr, cborErr
}

// cborOf encodes a JSON message as CBOR without validating it, by decoding
// it under huge limits first.
func cborOf(t *testing.T, jsonText string) []byte {
	t.Helper()
	m, err := DecodeJSON([]byte(jsonText), unlimited())
	if err != nil {
		t.Fatalf("cborOf: %v", err)
	}
	b, err := EncodeCBORWithLimits(m, unlimited())
	if err != nil {
		t.Fatalf("cborOf: %v", err)
	}
	return b
}

func TestMaxMessageBytes(t *testing.T) {
	msg := `{"format":"text","subformat":"en","content":"hello"}`
	for _, c := range []struct {
		limit int
		ok    bool
	}{{len(msg) + 1, true}, {len(msg), true}, {len(msg) - 1, false}} {
		_, err := DecodeJSON([]byte(msg), Limits{MaxMessageBytes: c.limit})
		if c.ok && err != nil || !c.ok && CodeOf(err) != CodeTooLarge {
			t.Errorf("limit %d: %v", c.limit, err)
		}
	}
	bin := cborOf(t, msg)
	if _, err := DecodeCBOR(bin, Limits{MaxMessageBytes: len(bin)}); err != nil {
		t.Errorf("CBOR at the limit: %v", err)
	}
	_, err := DecodeCBOR(bin, Limits{MaxMessageBytes: len(bin) - 1})
	wantError(t, err, CodeTooLarge, "")
}

// An oversized input is refused before parsing: garbage of the same size
// gets too_large, not malformed.
func TestOversizedRejectedBeforeParsing(t *testing.T) {
	garbage := []byte(strings.Repeat("\xff", 101))
	_, err := DecodeJSON(garbage, Limits{MaxMessageBytes: 100})
	wantError(t, err, CodeTooLarge, "")
	_, err = DecodeCBOR(garbage, Limits{MaxMessageBytes: 100})
	wantError(t, err, CodeTooLarge, "")
	_, err = DecodeJSON(garbage[:100], Limits{MaxMessageBytes: 100})
	wantError(t, err, CodeMalformed, "")
}

// countingReader is an endless stream that records how much was read.
type countingReader struct{ read int }

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	r.read += len(p)
	return len(p), nil
}

func TestReadLimited(t *testing.T) {
	msg := `{"format":"text","subformat":"en","content":"hi"}`
	data, err := ReadLimited(strings.NewReader(msg), Limits{MaxMessageBytes: len(msg)})
	if err != nil || string(data) != msg {
		t.Fatalf("at the limit: %q, %v", data, err)
	}
	_, err = ReadLimited(strings.NewReader(msg), Limits{MaxMessageBytes: len(msg) - 1})
	wantError(t, err, CodeTooLarge, "")

	endless := &countingReader{}
	_, err = ReadLimited(endless, Limits{MaxMessageBytes: 1000})
	wantError(t, err, CodeTooLarge, "")
	if endless.read > 1000+4096 {
		t.Fatalf("read %d bytes of an endless body", endless.read)
	}

	failing := io.MultiReader(strings.NewReader("{"), errReader{})
	if _, err := ReadLimited(failing, Limits{}); !errors.Is(err, errBrokenPipe) || CodeOf(err) != "" {
		t.Fatalf("read error = %v, want the wrapped reader error", err)
	}
}

var errBrokenPipe = errors.New("broken pipe")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBrokenPipe }

func TestMaxSubmessages(t *testing.T) {
	msgWith := func(n int) string {
		subs := make([]string, n)
		for i := range subs {
			subs[i] = `{"format":"text","subformat":"en","content":"` + strconv.Itoa(i) + `"}`
		}
		return withSubs(strings.Join(subs, ","))
	}
	lim := Limits{MaxSubmessages: 3}
	for n := 1; n <= 4; n++ {
		jsonErr, cborErr := decodeBoth(t, msgWith(n), lim)
		for codec, err := range map[string]error{"JSON": jsonErr, "CBOR": cborErr} {
			if n <= 3 && err != nil {
				t.Errorf("%s with %d submessages: %v", codec, n, err)
			}
			if n > 3 {
				wantError(t, err, CodeTooManySubmessages, "/submessages")
			}
		}
	}
	m := mustDecodeJSON(t, msgWith(4))
	wantError(t, m.Validate(lim), CodeTooManySubmessages, "/submessages")
}

func TestMaxContentDepth(t *testing.T) {
	nested := func(depth int) string {
		return repeat(`{"a":[`, depth/2) + repeat("[", depth%2) + "1" + repeat("]", depth%2) + repeat("]}", depth/2)
	}
	for _, limit := range []int{2, 5, 64} {
		lim := Limits{MaxContentDepth: limit}
		for _, depth := range []int{limit - 1, limit, limit + 1} {
			top := `{"format":"structured","subformat":"json","content":` + nested(depth) + `}`
			sub := withSubs(`{"format":"generic","subformat":"x","content":` + nested(depth) + `}`)
			for name, c := range map[string]struct{ input, pointer string }{
				"top": {top, "/content"}, "submessage": {sub, "/submessages/0/content"},
			} {
				jsonErr, cborErr := decodeBoth(t, c.input, lim)
				for codec, err := range map[string]error{"JSON": jsonErr, "CBOR": cborErr} {
					if depth <= limit && err != nil {
						t.Errorf("limit %d, %s depth %d, %s: %v", limit, name, depth, codec, err)
					}
					if depth > limit {
						wantError(t, err, CodeTooDeep, c.pointer)
					}
				}
				m, err := DecodeJSON([]byte(c.input), unlimited())
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Validate(lim); depth <= limit && err != nil || depth > limit && CodeOf(err) != CodeTooDeep {
					t.Errorf("Validate, limit %d, %s depth %d: %v", limit, name, depth, err)
				}
			}
		}
	}
}

func TestMaxContentBytes(t *testing.T) {
	const limit = 16
	lim := Limits{MaxContentBytes: limit}
	b64 := func(n int) string {
		return `"` + strings.TrimRight(encodeStd(make([]byte, n)), "=") + `"`
	}
	cases := map[string]func(n int) string{
		"text": func(n int) string {
			return `{"format":"text","subformat":"en","content":"` + repeat("é", n/2) + repeat("a", n%2) + `"}`
		},
		"binary": func(n int) string { return `{"format":"binary","subformat":"image/png","content":` + b64(n) + `}` },
		// Canonical length counts, not the input's: the spaces are free.
		"json": func(n int) string {
			return `{"format":"structured","subformat":"json","content":[ "` + repeat("x", n-4) + `" ]}`
		},
		"submessage": func(n int) string {
			return withSubs(`{"format":"text","subformat":"en","content":"` + repeat("a", n) + `"}`)
		},
	}
	for name, build := range cases {
		pointer := "/content"
		if name == "submessage" {
			pointer = "/submessages/0/content"
		}
		for _, n := range []int{limit - 1, limit, limit + 1} {
			jsonErr, cborErr := decodeBoth(t, build(n), lim)
			for codec, err := range map[string]error{"JSON": jsonErr, "CBOR": cborErr} {
				if n <= limit && err != nil {
					t.Errorf("%s of %d bytes, %s: %v", name, n, codec, err)
				}
				if n > limit {
					wantError(t, err, CodeTooLarge, pointer)
				}
			}
		}
	}
}

func TestMaxFieldBytes(t *testing.T) {
	const limit = 8
	lim := Limits{MaxFieldBytes: limit}
	for _, n := range []int{limit - 1, limit, limit + 1} {
		for name, c := range map[string]struct{ input, pointer string }{
			"label":       {withSubs(`{"label":"` + repeat("l", n) + `","format":"text","subformat":"en","content":"x"}`), "/submessages/0/label"},
			"subformat":   {`{"format":"generic","subformat":"` + repeat("s", n) + `","content":"x"}`, "/subformat"},
			"messagetype": {`{"messagetype":"` + repeat("m", n) + `","format":"text","subformat":"en","content":"x"}`, "/messagetype"},
		} {
			jsonErr, cborErr := decodeBoth(t, c.input, lim)
			for codec, err := range map[string]error{"JSON": jsonErr, "CBOR": cborErr} {
				if n <= limit && err != nil {
					t.Errorf("%s of %d bytes, %s: %v", name, n, codec, err)
				}
				if n > limit {
					wantError(t, err, CodeTooLarge, c.pointer)
				}
			}
		}
	}
}
