package streams

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/envelope"
)

const busImport = "github.com/alpd-project/alpd/internal/bus"

// subjectLiteral matches a string that spells an ALP subject or pattern,
// or starts one: "alp." followed by a token and a dot, or "alp." at the
// end (a prefix to concatenate onto). Scope and label names such as
// "alp.send" or "alp.to" have no second dot and are not subjects.
var subjectLiteral = regexp.MustCompile(`(^|[^A-Za-z0-9_.])alp\.([A-Za-z0-9_*>{}()%-]+\.|$)`)

// spellsSubject reports whether v spells a subject. Prose that describes
// the grammar, its tokens as placeholders ("alp.identity.<tenant>.…" in an
// error message), is not one.
func spellsSubject(v string) bool {
	for _, m := range subjectLiteral.FindAllStringIndex(v, -1) {
		if m[1] == len(v) || v[m[1]] != '<' {
			return true
		}
	}
	return false
}

// notScanned are the module's directories whose Go files the rule does
// not apply to, with the reason.
var notScanned = map[string]string{
	"internal/streams": "the vocabulary's home",
	"gen":              "generated protobuf code (alp.v1.* message names)",
}

// busHome may use the subject grammar and consumer specs directly: it
// defines them (bus.Subject, SubjectPrefix, its own dead-letter stream,
// ConsumerSpec.Durable).
const busHome = "internal/bus"

// TestNoLiteralSubjects keeps this package the only vocabulary between
// services (issue 11): outside it no Go code (tests aside, which assert
// the exact strings) spells a subject as a string literal, reaches for
// bus.SubjectPrefix to glue one together, hands bus.Subject a literal
// token, or names a durable consumer: consumers come from Consumers().
func TestNoLiteralSubjects(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	services := map[string]bool{}
	for _, r := range envelope.Roles() {
		services[envelope.ServiceName(r)] = true
	}
	// A literal equal to a durable name is one, unless the name is also a
	// service's (the policy consumer is named after its service); a
	// partition consumer's stem ("ledger_p") starts one.
	var durables, stems []string
	for _, c := range Consumers() {
		if !services[c.Durable] {
			durables = append(durables, c.Durable)
		}
		if c.Kind == PartitionConsumer {
			if stem := strings.TrimRight(c.Durable, "0123456789"); !slices.Contains(stems, stem) {
				stems = append(stems, stem)
			}
		}
	}
	if len(stems) == 0 {
		t.Fatal("the consumers table has no partition consumer: the stem rule checks nothing")
	}

	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if _, skip := notScanned[rel]; skip || (rel != "." && strings.HasPrefix(d.Name(), ".")) ||
				d.Name() == "testdata" || d.Name() == "vendor" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir // another module (tools)
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		found = append(found, literalSubjects(t, path, rel, strings.HasPrefix(rel, busHome+"/"), durables, stems)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
	if len(found) > 0 {
		t.Log("build subjects and filters with the builders of internal/streams, consumers from streams.Consumers()")
	}
}

// literalSubjects lists one file's breaches of the rule.
func literalSubjects(t *testing.T, path, rel string, inBus bool, durables, stems []string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	busName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == busImport {
			busName = "bus"
			if imp.Name != nil {
				busName = imp.Name.Name
			}
		}
	}
	isBus := func(e ast.Expr, name string) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != name {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && busName != "" && id.Name == busName
	}
	var out []string
	report := func(n ast.Node, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: ", rel, fset.Position(n.Pos()).Line)+fmt.Sprintf(format, args...))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(n.Value)
			if err != nil {
				return true
			}
			if spellsSubject(v) {
				report(n, "subject spelled as a literal: %s", n.Value)
			}
			if slices.Contains(durables, v) {
				report(n, "consumer name spelled as a literal: %s", n.Value)
			}
			for _, s := range stems {
				if strings.HasPrefix(v, s) {
					report(n, "partition consumer name spelled as a literal: %s", n.Value)
				}
			}
		case *ast.SelectorExpr:
			if !inBus && isBus(n, "SubjectPrefix") {
				report(n, "subject glued together from bus.SubjectPrefix")
			}
		case *ast.CallExpr:
			if isBus(n.Fun, "Subject") {
				for _, a := range n.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						report(a, "bus.Subject with a literal token %s", lit.Value)
					}
				}
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok && id.Name == "Durable" && !inBus {
				report(n, "consumer named outside the consumers table (Durable:)")
			}
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == "Durable" && !inBus {
					report(n, "consumer named outside the consumers table (.Durable =)")
				}
			}
		}
		return true
	})
	return out
}

func TestSpellsSubject(t *testing.T) {
	for v, want := range map[string]bool{
		"alp.send.example_org.>":      true,
		"alp.identity.*.erasure.*.%d": true,
		"x alp.decided.%s.%s":         true,
		"alp.":                        true,
		"alp.{{wildcard(1)}}.x":       true,
		"alp.send":                    false, // an OAuth scope
		"alp.to":                      false, // an NLIP label
		"alp.probe":                   false, // a hop type
		"use `alp.` subjects":         false,
		"ralp.send.x":                 false,
		"subject %q is not alp.identity.<tenant>.<aggregate>.<id>": false,
	} {
		if got := spellsSubject(v); got != want {
			t.Errorf("spellsSubject(%q) = %v, want %v", v, got, want)
		}
	}
}
