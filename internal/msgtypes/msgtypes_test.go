package msgtypes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	spectypes "github.com/alpd-project/alpd/spec/types"
)

func newRegistry(t testing.TB) *Registry {
	t.Helper()
	r, err := New()
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	fs, err := filepath.Glob(filepath.Join("testdata", dir, "*.json"))
	if err != nil || len(fs) == 0 {
		t.Fatalf("no testdata in %s: %v", dir, err)
	}
	return fs
}

// TestRefused registers every schema in testdata/refused and expects the
// code and schema pointer the file names, with the registry unchanged.
func TestRefused(t *testing.T) {
	codes := map[Code]bool{}
	for _, f := range files(t, "refused") {
		var c struct {
			Tenant, Name, Code, Pointer string
			Schema                      json.RawMessage
		}
		readJSON(t, f, &c)
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := newRegistry(t)
			before := r.Names()
			typ, err := r.Register(c.Tenant, c.Name, c.Schema)
			var re *RegistrationError
			if !errors.As(err, &re) {
				t.Fatalf("Register = %v, %v; want a *RegistrationError %s", typ, err, c.Code)
			}
			if string(re.Code) != c.Code || re.Pointer != c.Pointer {
				t.Fatalf("refused with %s at %q (%v); want %s at %q", re.Code, re.Pointer, err, c.Code, c.Pointer)
			}
			if re.Message == "" || !strings.Contains(err.Error(), c.Code) {
				t.Fatalf("error %q has no message or code", err)
			}
			if got := r.Names(); !slices.Equal(got, before) {
				t.Fatalf("a refused registration changed the registry: %v", got)
			}
		})
		codes[Code(c.Code)] = true
	}
	for _, want := range []Code{CodeUnclassifiedProperty, CodeUnknownKeyword, CodeFreetextUncapped, CodeRemoteRef,
		CodeNameCollidesWithBuiltin, CodeNameNotNamespaced, CodeSchemaTooLarge, CodeInvalidSchema, CodeInvalidName,
		CodeOpenObject, CodeOpenArray, CodeNotAnObject, CodeMisplacedKeyword, CodeInvalidKeywordValue,
		CodeUnsupportedKeyword, CodeUnknownFormat} {
		if !codes[want] {
			t.Errorf("no testdata/refused file covers %s", want)
		}
	}
}

func TestSchemaTooManyBytes(t *testing.T) {
	big := fmt.Sprintf(`{"type":"object","description":%q,"properties":{},"additionalProperties":false}`,
		strings.Repeat("x", MaxSchemaBytes))
	_, err := newRegistry(t).Register("example.org", "example.org/big/v1", []byte(big))
	var re *RegistrationError
	if !errors.As(err, &re) || re.Code != CodeSchemaTooLarge {
		t.Fatalf("Register of %d bytes = %v; want %s", len(big), err, CodeSchemaTooLarge)
	}
}

type bodyCase struct {
	Name   string
	Body   json.RawMessage
	Fields [][]any // [pointer, class, freetext]
	Errors [][]string
}

func runCases(t *testing.T, typ *Type, cases []bodyCase) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			verr := typ.Validate(c.Body)
			fields, cerr := typ.Check(c.Body)
			if c.Errors != nil {
				var ves ValidationErrors
				if !errors.As(verr, &ves) || !errors.As(cerr, &ves) {
					t.Fatalf("Validate = %v, Check = %v; want ValidationErrors %v", verr, cerr, c.Errors)
				}
				var got [][]string
				for _, e := range ves {
					got = append(got, []string{e.Pointer, e.Keyword})
					if e.Message == "" {
						t.Errorf("%v has no message", e)
					}
				}
				if !slices.EqualFunc(got, c.Errors, slices.Equal) {
					t.Fatalf("errors %v; want %v (%v)", got, c.Errors, ves)
				}
				return
			}
			if verr != nil || cerr != nil {
				t.Fatalf("Validate = %v, Check = %v; want valid", verr, cerr)
			}
			fonly, err := typ.Fields(c.Body)
			if err != nil || !slices.EqualFunc(fonly, fields, func(a, b Field) bool {
				return a.Pointer == b.Pointer && a.Class == b.Class && a.FreeText == b.FreeText
			}) {
				t.Fatalf("Fields = %v, %v; Check gave %v", fonly, err, fields)
			}
			if c.Fields == nil {
				return
			}
			var got [][]any
			for _, f := range fields {
				got = append(got, []any{f.Pointer, string(f.Class), f.FreeText})
				if f.Value == nil {
					t.Errorf("%s has no value", f.Pointer)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.Fields) {
				t.Fatalf("fields\n%v\nwant\n%v", got, c.Fields)
			}
		})
	}
}

// TestBodies runs testdata/bodies: for each built-in type, bodies that
// pass (with their fields) and bodies that fail (with pointer and keyword).
func TestBodies(t *testing.T) {
	r := newRegistry(t)
	covered := map[string]bool{}
	for _, f := range files(t, "bodies") {
		var c struct {
			Type  string
			Cases []bodyCase
		}
		readJSON(t, f, &c)
		typ, ok := r.Lookup(c.Type)
		if !ok {
			t.Fatalf("%s: no built-in %s", f, c.Type)
		}
		covered[c.Type] = true
		t.Run(c.Type, func(t *testing.T) { runCases(t, typ, c.Cases) })
	}
	for _, n := range r.Names() {
		if !covered[n] {
			t.Errorf("built-in %s has no testdata/bodies file", n)
		}
	}
}

// TestAccepted registers the organization types of testdata/accepted and
// runs their bodies.
func TestAccepted(t *testing.T) {
	for _, f := range files(t, "accepted") {
		var c struct {
			Tenant, Name string
			Schema       json.RawMessage
			Commits      []string
			Cases        []bodyCase
		}
		readJSON(t, f, &c)
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := newRegistry(t)
			typ, err := r.Register(c.Tenant, c.Name, c.Schema)
			if err != nil {
				t.Fatalf("Register: %v", err)
			}
			if got, ok := r.Lookup(c.Name); !ok || got != typ || typ.Owner() != c.Tenant || typ.Builtin() {
				t.Fatalf("Lookup(%s) = %v, %v", c.Name, got, ok)
			}
			if !slices.Equal(typ.Commits(), c.Commits) {
				t.Fatalf("Commits = %v; want %v", typ.Commits(), c.Commits)
			}
			runCases(t, typ, c.Cases)
		})
	}
}

func TestBuiltins(t *testing.T) {
	r := newRegistry(t)
	names := r.Names()
	if len(names) != 12 {
		t.Fatalf("built-ins %v; want the 12 of spec/types", names)
	}
	for _, n := range names {
		typ, _ := r.Lookup(n)
		if !typ.Builtin() {
			t.Errorf("%s is not built-in", n)
		}
		var doc struct{ Title string }
		if err := json.Unmarshal(typ.Schema(), &doc); err != nil || doc.Title != n {
			t.Errorf("%s: title %q; the file name and title must agree", n, doc.Title)
		}
		want := []string(nil)
		if n == "meeting.accept/v1" {
			want = []string{"meeting"}
		}
		if !slices.Equal(typ.Commits(), want) {
			t.Errorf("%s commits %v; want %v", n, typ.Commits(), want)
		}
	}
	// Every spec file is one type: a stray or misnamed file would fail New.
	spec, _ := fs.Glob(spectypes.Files(), "*.json")
	if len(spec) != len(names) {
		t.Fatalf("%d spec files, %d types", len(spec), len(names))
	}
}

func TestRegisterIdempotentAndImmutable(t *testing.T) {
	schema := `{"type":"object","properties":{"id":{"type":"string","maxLength":9,"x-alp-class":"public"}},"additionalProperties":false}`
	r1, r2 := newRegistry(t), newRegistry(t)
	a, err := r1.Register("example.org", "example.org/x/v1", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	// The same schema, spelled differently, is the same type: a replayed
	// registration event is harmless.
	again, err := r1.Register("example.org", "example.org/x/v1", []byte(" "+strings.ReplaceAll(schema, ":", ": ")))
	if err != nil || again != a {
		t.Fatalf("re-registering the same schema = %v, %v", again, err)
	}
	// Another replica computes the same type.
	b, err := r2.Register("example.org", "example.org/x/v1", []byte(schema))
	if err != nil || b.Digest() != a.Digest() {
		t.Fatalf("replica digest %v, %v; want %s", b, err, a.Digest())
	}
	changed := strings.Replace(schema, `"maxLength":9`, `"maxLength":10`, 1)
	_, err = r1.Register("example.org", "example.org/x/v1", []byte(changed))
	var re *RegistrationError
	if !errors.As(err, &re) || re.Code != CodeTypeExists {
		t.Fatalf("changing a registered version = %v; want %s", err, CodeTypeExists)
	}
	if _, err := r1.Register("example.org", "example.org/x/v2", []byte(changed)); err != nil {
		t.Fatalf("the next version: %v", err)
	}
	if _, err := r1.Register("Example.org", "example.org/x/v3", []byte(schema)); err == nil {
		t.Fatal("a non-canonical registering tenant was accepted")
	}
}

// TestFieldsRefusesUnclassified: Fields on a body the schema does not
// describe fails rather than skipping the member.
func TestFieldsRefusesUnclassified(t *testing.T) {
	typ, _ := newRegistry(t).Lookup("note/v1")
	if fs, err := typ.Fields([]byte(`{"text":"hi","smuggled":"x"}`)); err == nil {
		t.Fatalf("Fields = %v; want an error for /smuggled", fs)
	}
}

func TestConcurrentLookupAndRegister(t *testing.T) {
	r := newRegistry(t)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			s := `{"type":"object","properties":{},"additionalProperties":false}`
			if _, err := r.Register("example.org", fmt.Sprintf("example.org/t%d/v1", i), []byte(s)); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			for range 100 {
				if _, ok := r.Lookup("note/v1"); !ok {
					t.Error("note/v1 vanished")
				}
				_ = r.Names()
			}
		}()
	}
	wg.Wait()
	if n := len(r.Names()); n != 16 {
		t.Fatalf("%d types; want 16", n)
	}
}

func TestNames(t *testing.T) {
	for name, tenant := range map[string]string{
		"note/v1": "", "meeting.request/v12": "", "example.org/expense.approval/v1": "example.org",
		"a.b.example/x_y.z2/v3": "a.b.example",
	} {
		if got, p := splitName(name); p != "" || got != tenant {
			t.Errorf("splitName(%q) = %q, %q", name, got, p)
		}
	}
	for _, name := range []string{"", "note", "note/v0", "note/v01", "note/1", "Note/v1", "note./v1", ".note/v1",
		"1note/v1", "note-x/v1", "example.org/a/b/v1", "EXAMPLE.org/x/v1", "10.0.0.1/x/v1", "note/v1/", "note/vx"} {
		if _, p := splitName(name); p == "" {
			t.Errorf("splitName(%q) accepted", name)
		}
	}
}

// TestCheckStoresNothing: Check answers what Register would, and the
// registry stays as it was; the digest is the SHA-256 of Schema, so an
// event carrying both can be verified without a registry.
func TestCheckStoresNothing(t *testing.T) {
	schema := `{"type":"object","properties":{"id":{"type":"string","maxLength":9,"x-alp-class":"public"}},"additionalProperties":false}`
	r := newRegistry(t)
	c, err := r.Check("example.org", "example.org/x/v1", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup("example.org/x/v1"); ok {
		t.Fatal("Check stored the type")
	}
	if sum := sha256.Sum256(c.Schema()); hex.EncodeToString(sum[:]) != c.Digest() {
		t.Fatalf("digest %s is not the SHA-256 of the schema", c.Digest())
	}
	a, err := r.Register("example.org", "example.org/x/v1", []byte(schema))
	if err != nil || a.Digest() != c.Digest() {
		t.Fatalf("Register after Check = %v, %v", a, err)
	}
	if again, err := r.Check("example.org", "example.org/x/v1", []byte(schema)); err != nil || again != a {
		t.Fatalf("Check of the registered schema = %v, %v; want the registered type", again, err)
	}
	_, err = r.Check("example.org", "example.org/x/v1", []byte(strings.Replace(schema, "9", "10", 1)))
	var re *RegistrationError
	if !errors.As(err, &re) || re.Code != CodeTypeExists {
		t.Fatalf("Check of a changed schema = %v; want %s", err, CodeTypeExists)
	}
	_, err = r.Check("example.org", "other.example/x/v1", []byte(schema))
	if !errors.As(err, &re) || re.Code != CodeNameNotNamespaced {
		t.Fatalf("Check under another domain = %v; want %s", err, CodeNameNotNamespaced)
	}
}
