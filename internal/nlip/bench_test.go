package nlip

import (
	"encoding/json"
	"os"
	"testing"
)

// benchMessage is a realistic ~1 KB request: English text, AG2's three
// structured/json submessages and a conversation token.
func benchMessage(b *testing.B) []byte {
	b.Helper()
	data, err := os.ReadFile("testdata/bench-message.json")
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkDecodeValidate is the ingress cost of one JSON message: scan,
// canonicalise content, validate. Compare with BenchmarkStdlibMapDecode,
// which only parses the same bytes into map[string]any.
func BenchmarkDecodeValidate(b *testing.B) {
	data := benchMessage(b)
	lim := DefaultLimits()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJSON(data, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdlibMapDecode is the baseline: encoding/json into a map, with
// no validation, case folding or canonical content at all.
func BenchmarkStdlibMapDecode(b *testing.B) {
	data := benchMessage(b)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCBOR is the WebSocket binding's cost for the same message.
func BenchmarkDecodeCBOR(b *testing.B) {
	m, err := DecodeJSON(benchMessage(b), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	data, err := EncodeCBOR(m)
	if err != nil {
		b.Fatal(err)
	}
	lim := DefaultLimits()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCBOR(data, lim); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeJSON is the egress cost of the same message.
func BenchmarkEncodeJSON(b *testing.B) {
	m, err := DecodeJSON(benchMessage(b), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeJSON(m); err != nil {
			b.Fatal(err)
		}
	}
}
