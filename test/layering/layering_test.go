// Package layering keeps the package rule of docs/architecture.md: code in
// services/X runs only in the X process, so no service links another; a
// package in internal/ is shared by services, so it links none of them,
// except the two that assemble whole brokers (internal/daemon runs one,
// internal/brokertest starts one for tests). broker/ wires the services and
// may link them all.
//
// The rule holds for what the binaries link: each package's imports and
// their dependencies, as `go list` reports them. Test files are exempt:
// integration tests start a whole broker (broker, internal/brokertest), which
// links every service by design.
package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// pkg is what the rule reads of `go list -json`.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

// mayLinkServices are the internal packages that assemble whole brokers.
var mayLinkServices = []string{"internal/daemon", "internal/brokertest"}

// violations lists every break of the rule among pkgs of module mod.
func violations(mod string, pkgs []pkg) []string {
	rel := func(path string) (string, bool) {
		r, ok := strings.CutPrefix(path, mod+"/")
		return r, ok
	}
	// service is the service a module-relative path belongs to, "" for none.
	service := func(r string) string {
		parts := strings.SplitN(r, "/", 3)
		if len(parts) >= 2 && parts[0] == "services" {
			return parts[1]
		}
		return ""
	}
	under := func(r, dir string) bool { return r == dir || strings.HasPrefix(r, dir+"/") }
	var out []string
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		own := service(from)
		isInternal := under(from, "internal")
		if own == "" && !isInternal {
			continue // broker, cmd, gen, test: not bound by the rule
		}
		if isInternal && slices.ContainsFunc(mayLinkServices, func(d string) bool { return under(from, d) }) {
			continue
		}
		// A direct import names the culprit; a dependency through another
		// package (which is itself in breach, or is broker) is reported too.
		seen := map[string]bool{}
		check := func(path, how string) {
			to, ok := rel(path)
			if !ok || seen[to] {
				return
			}
			svc := service(to)
			if svc == "" || svc == own {
				return
			}
			seen[to] = true
			if own != "" {
				out = append(out, fmt.Sprintf("%s (service %s) %s %s (service %s): no service links another", from, own, how, to, svc))
			} else {
				out = append(out, fmt.Sprintf("%s %s %s: internal/ links services only from %s", from, how, to, strings.Join(mayLinkServices, " and ")))
			}
		}
		for _, imp := range p.Imports {
			check(imp, "imports")
		}
		for _, dep := range p.Deps {
			check(dep, "depends on")
		}
	}
	slices.Sort(out)
	return out
}

// list is `go list -json` of every package of the module.
func list(t *testing.T) (string, []pkg) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the import graph: %v", err)
	}
	cmd := exec.Command(goTool, "list", "-json=ImportPath,Imports,Deps,Module", "../../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	mod := ""
	for dec := json.NewDecoder(bytes.NewReader(data)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Module != nil && mod == "" {
			mod = p.Module.Path
		}
		pkgs = append(pkgs, p)
	}
	if mod == "" || len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of module %q; expected the whole module", len(pkgs), mod)
	}
	return mod, pkgs
}

// TestLayering checks the module's own import graph.
func TestLayering(t *testing.T) {
	mod, pkgs := list(t)
	for _, v := range violations(mod, pkgs) {
		t.Error(v)
	}
	// The rule must have something to bite on: if the paths moved, it
	// would pass vacuously.
	var services, internals int
	for _, p := range pkgs {
		switch {
		case strings.HasPrefix(p.ImportPath, mod+"/services/"):
			services++
		case strings.HasPrefix(p.ImportPath, mod+"/internal/"):
			internals++
		}
	}
	if services < 6 || internals < 10 {
		t.Fatalf("found %d service and %d internal packages; the layout the rule names has moved", services, internals)
	}
}

// TestViolations shows the rule catches each kind of breach on a made-up
// graph, and lets through what is allowed.
func TestViolations(t *testing.T) {
	const m = "example.com/m"
	pkgs := []pkg{
		{ImportPath: m + "/services/ledger/api", Imports: []string{m + "/services/ingress", m + "/services/ledger", m + "/internal/bus"}},
		{ImportPath: m + "/services/policy", Imports: []string{m + "/internal/helper"}, Deps: []string{m + "/internal/helper", m + "/services/identity/oauthas"}},
		{ImportPath: m + "/internal/helper", Imports: []string{m + "/services/identity/oauthas"}},
		{ImportPath: m + "/internal/daemon", Imports: []string{m + "/broker", m + "/services/ingress"}},
		{ImportPath: m + "/internal/brokertest", Imports: []string{m + "/services/ingress"}},
		{ImportPath: m + "/internal/brokertestx", Imports: []string{m + "/services/ingress"}},
		{ImportPath: m + "/broker", Imports: []string{m + "/services/ingress", m + "/services/identity"}},
		{ImportPath: m + "/cmd/alpd", Deps: []string{m + "/services/ingress"}},
		{ImportPath: m + "/services/identity", Imports: []string{m + "/services/identity/oauthas", "fmt"}},
	}
	got := violations(m, pkgs)
	want := []string{
		"internal/brokertestx imports services/ingress: internal/ links services only from internal/daemon and internal/brokertest",
		"internal/helper imports services/identity/oauthas: internal/ links services only from internal/daemon and internal/brokertest",
		"services/ledger/api (service ledger) imports services/ingress (service ingress): no service links another",
		"services/policy (service policy) depends on services/identity/oauthas (service identity): no service links another",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
