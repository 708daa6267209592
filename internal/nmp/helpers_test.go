package nmp

import (
	"errors"
	"os"
	"testing"
)

// wantError fails unless err is an *Error with the given code and field.
func wantError(t *testing.T, err error, code, field string) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s at %q", code, field)
	}
	e, ok := err.(*Error)
	if !ok {
		var ae *Error
		if errors.As(err, &ae) {
			t.Fatalf("error is wrapped (%T), want a bare *Error: %v", err, err)
		}
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if e.Code != code || e.Field != field {
		t.Fatalf("error %q/%q (%s), want %q/%q", e.Code, e.Field, e.Message, code, field)
	}
	return e
}

func readSample(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/readme-nmp_message.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }
