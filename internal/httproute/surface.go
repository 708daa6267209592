package httproute

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Space is the part of the URL space one owner (a service, the broker
// itself) holds, whether or not it runs in this process: the URL plan in
// docs/architecture.md, in code. Each owner declares its own; the broker
// mounts every owner's routes on one mux and refuses owners whose spaces
// overlap, so two services can never answer the same path.
type Space struct {
	// Owner names the owner ("identity") in errors and answers.
	Owner string
	// Paths are exact paths ("/signout") and subtrees ending in a slash
	// ("/oauth/"), as http.ServeMux reads them, without methods or
	// wildcards.
	Paths []string
}

// Check reports what is wrong with the space's declaration.
func (s Space) Check() error {
	if s.Owner == "" {
		return fmt.Errorf("httproute: a space %v has no owner", s.Paths)
	}
	for i, p := range s.Paths {
		switch {
		case !strings.HasPrefix(p, "/"):
			return fmt.Errorf("httproute: %s's path %q must start with /", s.Owner, p)
		case strings.ContainsAny(p, "{} \t"):
			return fmt.Errorf("httproute: %s's path %q holds a wildcard or a space", s.Owner, p)
		case slices.Contains(s.Paths[:i], p):
			return fmt.Errorf("httproute: %s declares path %q twice", s.Owner, p)
		}
	}
	return nil
}

// Holds reports whether every request a route pattern (a Route's Pattern,
// wildcards allowed) can match lies in the space.
func (s Space) Holds(pattern string) bool {
	for _, p := range s.Paths {
		if p == pattern || (strings.HasSuffix(p, "/") && strings.HasPrefix(pattern, p)) {
			return true
		}
	}
	return false
}

// overlap is the first pair of paths of s and o that a request can match
// both of.
func (s Space) overlap(o Space) (mine, theirs string, ok bool) {
	for _, a := range s.Paths {
		for _, b := range o.Paths {
			if a == b || (strings.HasSuffix(a, "/") && strings.HasPrefix(b, a)) ||
				(strings.HasSuffix(b, "/") && strings.HasPrefix(a, b)) {
				return a, b, true
			}
		}
	}
	return "", "", false
}

// CheckSpaces refuses an invalid space, an owner named twice and two
// spaces that overlap, naming both paths.
func CheckSpaces(spaces []Space) error {
	for i, s := range spaces {
		if err := s.Check(); err != nil {
			return err
		}
		for _, o := range spaces[:i] {
			if o.Owner == s.Owner {
				return fmt.Errorf("httproute: owner %s declares two spaces", s.Owner)
			}
			if a, b, ok := o.overlap(s); ok {
				return fmt.Errorf("httproute: %s's %q overlaps %s's %q", o.Owner, a, s.Owner, b)
			}
		}
	}
	return nil
}

// Surface is an owner's space with what it serves in this process.
type Surface struct {
	Space
	// Routes are the owner's routes here, each within its space.
	Routes []Route
	// Absent, when set, answers every path of the space instead: the owner
	// does not serve here (it runs in another process, or has not started).
	// It is mounted without a body limit, since it reads no body.
	Absent http.Handler
}

// MountSurfaces mounts every surface on mux: the routes (through Mount)
// and the absent owners' answers. It refuses, and registers nothing of, an
// invalid space, spaces that overlap, a route outside its owner's space,
// an owner with both routes and an absent answer, and routes Mount
// refuses (an invalid route, a key given twice, conflicting patterns).
func MountSurfaces(mux *http.ServeMux, surfaces []Surface) error {
	spaces := make([]Space, len(surfaces))
	var routes []Route
	for i, s := range surfaces {
		spaces[i] = s.Space
		if s.Absent != nil && len(s.Routes) > 0 {
			return fmt.Errorf("httproute: %s is absent but has %d routes", s.Owner, len(s.Routes))
		}
		for _, rt := range s.Routes {
			if !s.Holds(rt.Pattern) {
				return fmt.Errorf("httproute: %s's route %q lies outside its paths %v", s.Owner, rt.Key(), s.Paths)
			}
		}
		routes = append(routes, s.Routes...)
	}
	if err := CheckSpaces(spaces); err != nil {
		return err
	}
	// Disjoint spaces, each route in its own, leave no absent path in
	// conflict with a route; mount checks it all the same.
	var absent []entry
	for _, s := range surfaces {
		if s.Absent == nil {
			continue
		}
		for _, p := range s.Paths {
			absent = append(absent, entry{p, s.Absent})
		}
	}
	return mount(mux, routes, absent)
}
