package freetext

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// input is a test text: a JSON string, or a list of pieces each repeated, so
// a 281-character case stays readable.
type input string

func (in *input) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*in = input(s)
		return nil
	}
	var parts []struct {
		S string `json:"s"`
		N int    `json:"n"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	var sb strings.Builder
	for _, p := range parts {
		n := p.N
		if n == 0 {
			n = 1
		}
		sb.WriteString(strings.Repeat(p.S, n))
	}
	*in = input(sb.String())
	return nil
}

type testCase struct {
	Name    string `json:"name"`
	Input   input  `json:"input"`
	OptedIn *bool  `json:"opted_in"`
	Max     int    `json:"max"`
	Want    struct {
		Code     Code     `json:"code"`
		Runes    int      `json:"runes"`
		Text     *string  `json:"text"`
		Stripped Stripped `json:"stripped"`
	} `json:"want"`
}

func loadCases(t *testing.T) []testCase {
	t.Helper()
	b, err := os.ReadFile("testdata/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		About string     `json:"about"`
		Cases []testCase `json:"cases"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("testdata/cases.json: %v", err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("no cases")
	}
	return f.Cases
}

func TestCases(t *testing.T) {
	for _, c := range loadCases(t) {
		t.Run(c.Name, func(t *testing.T) {
			opted := c.OptedIn == nil || *c.OptedIn
			n, err := Check(string(c.Input), opted, c.Max)
			var fe *Error
			switch {
			case c.Want.Code == "" && err != nil:
				t.Fatalf("Check refused: %v", err)
			case c.Want.Code != "" && !errors.As(err, &fe):
				t.Fatalf("Check = %v, want %s", err, c.Want.Code)
			case c.Want.Code != "" && fe.Code != c.Want.Code:
				t.Fatalf("code = %s, want %s (%v)", fe.Code, c.Want.Code, err)
			}
			if fe != nil && len(n.Text()) >= 5 && strings.Contains(fe.Error(), n.Text()) {
				t.Errorf("error %q repeats the text", fe.Error())
			}
			if n.Runes() != c.Want.Runes {
				t.Errorf("runes = %d, want %d", n.Runes(), c.Want.Runes)
			}
			if c.Want.Text != nil && n.Text() != *c.Want.Text {
				t.Errorf("text = %q, want %q", n.Text(), *c.Want.Text)
			}
			if n.Stripped() != c.Want.Stripped {
				t.Errorf("stripped = %+v, want %+v", n.Stripped(), c.Want.Stripped)
			}
		})
	}
}

func TestInvalidUTF8(t *testing.T) {
	n, err := Check("ok\xffok", true, 0)
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != CodeInvalidUTF8 {
		t.Fatalf("Check = %v, want %s", err, CodeInvalidUTF8)
	}
	if !n.InvalidUTF8() || !utf8.ValidString(n.Text()) {
		t.Fatalf("Normalized = %+v, want replaced and flagged", n)
	}
}

func TestTooLongOffset(t *testing.T) {
	s := strings.Repeat("é", 281)
	_, err := Check(s, true, 0)
	var fe *Error
	if !errors.As(err, &fe) || fe.Offset != 280*len("é") {
		t.Fatalf("Check = %#v, want offset %d", err, 280*len("é"))
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"", "abc", "e\u200b\u0301", "\ufb03\u202e", "\U000E0041", "\xff", "４１１１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if !utf8.ValidString(n.Text()) {
			t.Fatalf("Normalize(%q) is not UTF-8", s)
		}
		if n.Runes() != utf8.RuneCountInString(n.Text()) {
			t.Fatalf("Runes = %d for %q", n.Runes(), n.Text())
		}
		again := Normalize(n.Text())
		if again.Text() != n.Text() || again.Stripped().Total() != 0 {
			t.Fatalf("Normalize not idempotent: %q → %q → %q (%+v)", s, n.Text(), again.Text(), again.Stripped())
		}
		for _, r := range n.Text() {
			if stripKind(r) != keep {
				t.Fatalf("Normalize(%q) kept U+%04X", s, r)
			}
		}
	})
}
