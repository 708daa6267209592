package nlip

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vectorsFile holds nlip_sdk's validation verdicts, not a message.
const vectorsFile = "nlip_sdk-0.1.3-validation-vectors.json"

// sampleFiles lists the message samples (every file but the vectors).
func sampleFiles(tb testing.TB) []string {
	tb.Helper()
	files, err := filepath.Glob("testdata/samples/*.json")
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if filepath.Base(f) != vectorsFile {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		tb.Fatal("no samples in testdata/samples")
	}
	return out
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func mustDecodeJSON(tb testing.TB, data string) *Message {
	tb.Helper()
	m, err := DecodeJSON([]byte(data), Limits{})
	if err != nil {
		tb.Fatalf("DecodeJSON(%s): %v", abbreviate(data), err)
	}
	return m
}

// wantError asserts err is an *Error with this code and pointer.
func wantError(tb testing.TB, err error, code, pointer string) {
	tb.Helper()
	var e *Error
	if !errors.As(err, &e) {
		tb.Fatalf("error = %v (%T), want *Error %s at %q", err, err, code, pointer)
	}
	if e.Code != code || e.Pointer != pointer {
		tb.Fatalf("error = %s at %q (%s), want %s at %q", e.Code, e.Pointer, e.Message, code, pointer)
	}
	if e.Message == "" {
		tb.Fatalf("error %s at %q has no message", code, pointer)
	}
}

func abbreviate(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// roundTrip checks that m survives JSON and CBOR encoding unchanged.
func roundTrip(tb testing.TB, m *Message) {
	tb.Helper()
	j, err := EncodeJSON(m)
	if err != nil {
		tb.Fatalf("EncodeJSON: %v", err)
	}
	fromJSON, err := DecodeJSON(j, Limits{})
	if err != nil {
		tb.Fatalf("DecodeJSON(EncodeJSON(m) = %s): %v", abbreviate(string(j)), err)
	}
	if !fromJSON.Equal(m) {
		tb.Fatalf("JSON round trip changed the message:\n got %+v\nwant %+v\nwire %s", fromJSON, m, j)
	}
	c, err := EncodeCBOR(m)
	if err != nil {
		tb.Fatalf("EncodeCBOR: %v", err)
	}
	fromCBOR, err := DecodeCBOR(c, Limits{})
	if err != nil {
		tb.Fatalf("DecodeCBOR(EncodeCBOR(m) = %x): %v", c, err)
	}
	if !fromCBOR.Equal(m) {
		tb.Fatalf("CBOR round trip changed the message:\n got %+v\nwant %+v", fromCBOR, m)
	}
}

func repeat(s string, n int) string { return strings.Repeat(s, n) }

func encodeStd(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func hexString(b []byte) string { return hex.EncodeToString(b) }
