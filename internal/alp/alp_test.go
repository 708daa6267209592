package alp

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// checkError fails t unless err is nil or an *Error of kind for input in
// with a reason; it returns the *Error.
func checkError(t *testing.T, err, kind error, in string) *Error {
	t.Helper()
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.Is(err, kind) || !errors.As(err, &e) || e.Input != in || e.Reason == "" {
		t.Errorf("%q: %v is not an *Error wrapping %v with the input and a reason", in, err, kind)
		return nil
	}
	return e
}

// label makes a DNS label of n letters.
func label(n int) string { return strings.Repeat("a", n) }

// name makes a dotted name of exactly n bytes from 49-byte labels.
func name(n int) string {
	var b strings.Builder
	for b.Len()+50 < n {
		b.WriteString(label(49) + ".")
	}
	b.WriteString(label(n - b.Len()))
	return b.String()
}

func TestTenant(t *testing.T) {
	for _, tt := range []struct {
		in     string
		valid  bool   // ValidateTenant accepts in as it is
		parsed string // what ParseTenant returns; "" if it refuses
		reason string // part of the refusal's reason, if checked
	}{
		{"example.org", true, "example.org", ""},
		{"localhost", true, "localhost", ""},
		{"a-b.c0.example", true, "a-b.c0.example", ""},
		{"xn--bcher-kva.example", true, "xn--bcher-kva.example", ""},
		{"4chan.example", true, "4chan.example", ""},
		{"example.123a", true, "example.123a", ""},
		{label(63) + ".org", true, label(63) + ".org", ""},
		{name(253), true, name(253), ""},
		{"Example.ORG", false, "example.org", "must be lowercase"},
		{"LOCALHOST", false, "localhost", "must be lowercase"},
		{"", false, "", "is empty"},
		{"example.org.", false, "", "empty label"},
		{".example.org", false, "", "empty label"},
		{"a..b", false, "", "empty label"},
		{".", false, "", "empty label"},
		{label(64) + ".org", false, "", "longer than 63"},
		{name(254), false, "", "longer than 253"},
		{"-example.org", false, "", "starts or ends with -"},
		{"example-.org", false, "", "starts or ends with -"},
		{"bücher.example", false, "", "xn--"},
		{"\u212Aelvin.example", false, "", "xn--"}, // the Kelvin sign is not "k"
		{"ex_ample.org", false, "", `'_' is not allowed`},
		{"exa mple.org", false, "", "is not allowed"},
		{"exa*mple.org", false, "", "is not allowed"},
		{"ana@example.org", false, "", "is not allowed"},
		{"example.org/x", false, "", "is not allowed"},
		{"10.0.0.1", false, "", "IP address"},
		{"123", false, "", "IP address"},
		{"[::1]", false, "", "is not allowed"},
	} {
		err := ValidateTenant(tt.in)
		if (err == nil) != tt.valid {
			t.Errorf("ValidateTenant(%q) = %v, want valid=%v", tt.in, err, tt.valid)
		}
		got, perr := ParseTenant(tt.in)
		if string(got) != tt.parsed || (perr == nil) != (tt.parsed != "") {
			t.Errorf("ParseTenant(%q) = %q, %v; want %q", tt.in, got, perr, tt.parsed)
		}
		for _, err := range []error{err, perr} {
			if e := checkError(t, err, ErrInvalidTenant, tt.in); e != nil && !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("%q: reason %q, want it to mention %q", tt.in, e.Reason, tt.reason)
			}
		}
	}
}

func TestTenantsHosts(t *testing.T) {
	ts := Tenants{"example.org", "localhost"}
	for in, want := range map[string]bool{
		"example.org": true, "localhost": true, "Example.org": false, "example.org.": false, "other.example": false, "": false,
	} {
		if got := ts.Hosts(in); got != want {
			t.Errorf("Hosts(%q) = %v, want %v", in, got, want)
		}
	}
	if Tenants(nil).Hosts("example.org") {
		t.Error("an empty set hosts a tenant")
	}
}

func TestAddress(t *testing.T) {
	for _, tt := range []struct {
		in     string
		valid  bool   // ValidateAddress accepts in as stored
		parsed string // what ParseAddress returns; "" if it refuses
	}{
		{"ana@example.org", true, "ana@example.org"},
		{"acct:ana@example.org", false, "ana@example.org"},
		{"ACCT:Ana@Example.org", false, "ana@example.org"},
		{"acct:", false, ""},
		{"acct:acct:ana@example.org", false, ""},
		{"Ana@example.org", true, "ana@example.org"}, // a stored local part keeps its case
		{"ana@Example.org", false, "ana@example.org"},
		{"Ana@Example.ORG", false, "ana@example.org"},
		{"a.b+c@sub.example.org", true, "a.b+c@sub.example.org"},
		{"x@xn--bcher-kva.example", true, "x@xn--bcher-kva.example"},
		{"o'brien@example.org", true, "o'brien@example.org"},
		{"ana@localhost", true, "ana@localhost"},
		{label(64) + "@example.org", true, label(64) + "@example.org"},
		{"a@" + name(252), true, "a@" + name(252)}, // 254
		{"ab@" + name(252), false, ""},             // 255
		{label(65) + "@example.org", false, ""},
		{"@example.org", false, ""},
		{"acct:@example.org", false, ""},
		{"ana@", false, ""},
		{"ana", false, ""},
		{"", false, ""},
		{"ana@example.org.", false, ""},
		{"ana@@example.org", false, ""},
		{"ana@b@example.org", false, ""},
		{"Ana <ana@example.org>", false, ""},
		{"\"quoted\"@example.org", false, ""},
		{"a(comment)@example.org", false, ""},
		{"ana@exa mple.org", false, ""},
		{" ana@example.org", false, ""},
		{"ana@example.org\n", false, ""},
		{".ana@example.org", false, ""},
		{"ana.@example.org", false, ""},
		{"a..b@example.org", false, ""},
		{"ana@-x.example.org", false, ""},
		{"ana@exämple.org", false, ""},
		{"änа@example.org", false, ""},
		{"ana\u200b@example.org", false, ""},
		{"ana@example_org.example", false, ""},
		{"ana@[127.0.0.1]", false, ""},
		{"ana@127.0.0.1", false, ""},
		{"ana@example.org/evil.com", false, ""},
	} {
		err := ValidateAddress(tt.in)
		if (err == nil) != tt.valid {
			t.Errorf("ValidateAddress(%q) = %v, want valid=%v", tt.in, err, tt.valid)
		}
		a, perr := ParseAddress(tt.in)
		if a.String() != tt.parsed || (perr == nil) != (tt.parsed != "") {
			t.Errorf("ParseAddress(%q) = %q, %v; want %q", tt.in, a, perr, tt.parsed)
		}
		if perr == nil {
			if a.Local()+"@"+a.Domain() != tt.parsed || a.IsZero() {
				t.Errorf("ParseAddress(%q): parts %q, %q", tt.in, a.Local(), a.Domain())
			}
			if tt.valid && NormalizeAddress(tt.in) != a.String() {
				t.Errorf("NormalizeAddress(%q) = %q, ParseAddress gives %q", tt.in, NormalizeAddress(tt.in), a)
			}
		}
		checkError(t, err, ErrInvalidAddress, tt.in)
		checkError(t, perr, ErrInvalidAddress, tt.in)
	}
	if (Address{}).String() != "" || !(Address{}).IsZero() {
		t.Error("the zero Address is not empty")
	}
}

func TestPersonID(t *testing.T) {
	for _, tt := range []struct {
		in    string
		valid bool
	}{
		{"p_0123456789abcdef0123456789abcdef", true},
		{"alice", true},
		{"Alice-2_x", true},
		{label(128), true},
		{label(129), false},
		{"", false},
		{"a.b", false},
		{".hidden", false},
		{"a*", false},
		{"a>", false},
		{"a b", false},
		{" a", false},
		{"a\t", false},
		{"a\n", false},
		{"a/b", false},
		{"a+b", false},
		{"ana@example.org", false},
		{"é", false},
	} {
		err := ValidatePersonID(tt.in)
		if (err == nil) != tt.valid {
			t.Errorf("ValidatePersonID(%q) = %v, want valid=%v", tt.in, err, tt.valid)
		}
		checkError(t, err, ErrInvalidPersonID, tt.in)
		if err := ValidatePerson("example.org", tt.in); (err == nil) != tt.valid {
			t.Errorf("ValidatePerson(example.org, %q) = %v, want valid=%v", tt.in, err, tt.valid)
		}
	}
	checkError(t, ValidatePerson("Example.org", "alice"), ErrInvalidTenant, "Example.org")
}

func TestScopes(t *testing.T) {
	s := Scopes()
	if !slices.IsSorted(s) || !slices.Contains(s, ScopeSend) || !slices.Contains(s, ScopeRead) || len(slices.Compact(slices.Clone(s))) != len(s) {
		t.Fatalf("Scopes() = %v", s)
	}
}

func TestValidateTenants(t *testing.T) {
	for _, tc := range []struct {
		in []string
		ok bool
	}{
		{nil, true}, {[]string{"a.example", "b.example"}, true},
		{[]string{"a.example", "a.example"}, false}, {[]string{"a.example", "A.example"}, false}, {[]string{"a..b"}, false},
	} {
		if err := ValidateTenants(tc.in); (err == nil) != tc.ok {
			t.Errorf("ValidateTenants(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}

func TestIsScopeToken(t *testing.T) {
	for s, want := range map[string]bool{
		"alp.send": true, "groups": true, "a!#[]~": true, "https://x.example/s": true,
		"": false, "a b": false, "a\"b": false, "a\\b": false, "\x7f": false, "é": false, "a\tb": false,
	} {
		if got := IsScopeToken(s); got != want {
			t.Errorf("IsScopeToken(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestErrorQuotesAndTruncates(t *testing.T) {
	msg := ValidateTenant("\x1b[31m" + strings.Repeat("A", 500)).Error()
	if strings.ContainsRune(msg, 0x1b) || len(msg) > 200 {
		t.Fatalf("error message not quoted or not truncated: %s", msg)
	}
}
