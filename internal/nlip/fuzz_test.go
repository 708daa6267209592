package nlip

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
)

// fuzzSeeds are the JSON samples, the nlip_sdk vector inputs and the
// benchmark message.
func fuzzSeeds(f *testing.F) [][]byte {
	f.Helper()
	var seeds [][]byte
	for _, path := range sampleFiles(f) {
		seeds = append(seeds, readFile(f, path))
	}
	var vectors sdkVectors
	if err := json.Unmarshal(readFile(f, filepath.Join("testdata/samples", vectorsFile)), &vectors); err != nil {
		f.Fatal(err)
	}
	for _, c := range vectors.Cases {
		seeds = append(seeds, c.Input)
	}
	return append(seeds, readFile(f, "testdata/bench-message.json"))
}

// FuzzDecodeJSON: no input panics; a rejection is an *Error; an accepted
// message is valid, is well-formed JSON, and re-encodes (JSON and CBOR) to
// an equal message.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeJSON(data, Limits{})
		if err != nil {
			requireNLIPError(t, err)
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		checkAccepted(t, m)
	})
}

// FuzzDecodeCBOR is FuzzDecodeJSON for CBOR, seeded with the samples
// re-encoded by EncodeCBOR.
func FuzzDecodeCBOR(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		if m, err := DecodeJSON(s, Limits{}); err == nil {
			b, err := EncodeCBOR(m)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeCBOR(data, Limits{})
		if err != nil {
			requireNLIPError(t, err)
			return
		}
		checkAccepted(t, m)
	})
}

func requireNLIPError(t *testing.T, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code == "" || e.Message == "" {
		t.Fatalf("rejection is not a complete *Error: %#v", err)
	}
}

func checkAccepted(t *testing.T, m *Message) {
	t.Helper()
	if err := m.Validate(Limits{}); err != nil {
		t.Fatalf("decoded message does not validate: %v\n%+v", err, m)
	}
	roundTrip(t, m)
	back, err := FromHeader(ToHeader(m), nil)
	if err != nil {
		t.Fatalf("FromHeader(ToHeader(m)): %v", err)
	}
	if want, _ := m.WithoutAuthenticationTokens(); !back.Equal(want) {
		t.Fatalf("header round trip changed the message:\n got %+v\nwant %+v", back, want)
	}
}
