package msgtypes

import (
	"errors"
	"testing"
)

// A member another broker's sender side withheld is no required failure;
// any other missing member, or another keyword, still is.
func TestCheckWithheld(t *testing.T) {
	r, err := New()
	if err != nil {
		t.Fatal(err)
	}
	typ, ok := r.Lookup("connection.request/v1")
	if !ok {
		t.Fatal("no connection.request/v1")
	}
	var ves ValidationErrors
	if _, _, err := typ.CheckValue([]byte(`{}`)); !errors.As(err, &ves) || ves[0].Keyword != "required" {
		t.Fatalf("a body without purpose: %v, want required", err)
	}
	if _, _, err := typ.CheckWithheld([]byte(`{}`), []string{"/purpose"}); err != nil {
		t.Errorf("purpose withheld: %v", err)
	}
	if _, _, err := typ.CheckWithheld([]byte(`{}`), []string{"/message"}); err == nil {
		t.Error("another member withheld excused the missing purpose")
	}
	if _, _, err := typ.CheckWithheld([]byte(`{"purpose":"lunch"}`), []string{"/purpose"}); err == nil {
		t.Error("a withheld list excused a value outside the enum")
	}
}
