package spec

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/services/federation"
	"github.com/alpd-project/alpd/services/federation/discovery"
)

// docs are the spec's own texts, read once per test.
func docs(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = string(b)
	}
	for _, want := range []string{"README.md", "alp.md"} {
		if _, ok := out[want]; !ok {
			t.Fatalf("spec/%s is missing", want)
		}
	}
	return out
}

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinksResolve: every relative link in spec/*.md names a file or
// directory that exists, and a #fragment into a Markdown file names one of
// its headings (GitHub's anchor rule).
func TestLinksResolve(t *testing.T) {
	for name, text := range docs(t) {
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			if path == "" {
				path = name
			}
			info, err := os.Stat(filepath.FromSlash(path))
			if err != nil {
				t.Errorf("%s: link %q: %v", name, target, err)
				continue
			}
			if fragment == "" || info.IsDir() || !strings.HasSuffix(path, ".md") {
				continue
			}
			b, err := os.ReadFile(filepath.FromSlash(path))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(anchors(string(b)), fragment) {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", name, target, path, fragment)
			}
		}
	}
}

// anchors returns the GitHub anchors of a Markdown text's headings:
// lowercased, spaces as '-', every character but letters, marks, digits,
// connector punctuation ('_') and '-' dropped.
func anchors(text string) []string {
	var out []string
	inFence := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// refusalCodes reads every string constant named Code* in the Go sources
// of dir (tests excluded): the codes that package can answer with.
func refusalCodes(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{} // value → constant name
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal; read it another way", p, n.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					codes[v] = n.Name
				}
			}
		}
	}
	return codes
}

// TestRefusalCodesDocumented: every code of alp-wire/v1, of the federation
// receiver and of discovery appears in alp.md, in backquotes.
func TestRefusalCodesDocumented(t *testing.T) {
	text := docs(t)["alp.md"]
	for _, c := range []struct {
		dir  string
		some string // one constant, imported, that the scan must find
	}{
		{"../internal/alpwire", alpwire.CodeBadSignature},
		{"../internal/alpwire", alpwire.CodeSplitView},
		{"../services/federation", federation.CodeStrangerType},
		{"../services/federation", federation.CodeUnknownEnvelope},
		{"../services/federation/discovery", discovery.CodeRedirect},
	} {
		codes := refusalCodes(t, c.dir)
		if _, ok := codes[c.some]; !ok {
			t.Fatalf("%s: the scan found %d codes but not %q", c.dir, len(codes), c.some)
		}
		for v, name := range codes {
			if !strings.Contains(text, "`"+v+"`") {
				t.Errorf("%s.%s (%q) is not in spec/alp.md", filepath.Base(c.dir), name, v)
			}
		}
	}
}

// TestDataFilesMentioned: every message type file and every vector file is
// named in spec/alp.md or spec/README.md. A vector file counts as named
// when its name appears next to a mention of its directory, or when the
// spec names its directory as a whole (linked, "](vectors/<dir>/)", or
// "every file of `vectors/<dir>/`"), which says every file of it is
// normative.
func TestDataFilesMentioned(t *testing.T) {
	all := ""
	for _, text := range docs(t) {
		all += text
	}
	types, err := filepath.Glob("types/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(types) == 0 {
		t.Fatal("no type files in spec/types")
	}
	for _, p := range types {
		if !strings.Contains(all, filepath.Base(p)) {
			t.Errorf("spec/%s is not mentioned in spec/*.md", filepath.ToSlash(p))
		}
	}
	vectors, err := filepath.Glob("vectors/*/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(vectors) == 0 {
		t.Fatal("no vector files in spec/vectors")
	}
	for _, p := range vectors {
		if info, err := os.Stat(p); err != nil || info.IsDir() {
			continue
		}
		p = filepath.ToSlash(p)
		dir := filepath.ToSlash(filepath.Dir(p)) + "/"
		if strings.Contains(all, "]("+dir+")") || strings.Contains(all, "every file of `"+dir+"`") {
			continue
		}
		if !strings.Contains(all, dir) || !strings.Contains(all, "`"+filepath.Base(p)+"`") && !strings.Contains(all, p) {
			t.Errorf("spec/%s is not mentioned in spec/*.md", p)
		}
	}
}
