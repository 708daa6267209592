package httproute_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/httproute"
)

func route(method, pattern string) httproute.Route {
	return httproute.Route{Method: method, Pattern: pattern, Handler: ok, Caller: httproute.Public, BodyLimit: httproute.NoBody}
}

func TestSpaceHolds(t *testing.T) {
	s := httproute.Space{Owner: "a", Paths: []string{"/nlip", "/nlip/", "/v1/pats"}}
	for p, want := range map[string]bool{
		"/nlip": true, "/nlip/": true, "/nlip/envelopes/{id}": true, "/nlip/{rest...}": true, "/v1/pats": true,
		"/v1/pats/{id}": false, "/nlipx": false, "/": false, "/{any}": false, "/v1/": false,
	} {
		if got := s.Holds(p); got != want {
			t.Errorf("Holds(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestSurfacesThatOverlapAreRefused is the rule that keeps one HTTP
// surface: two owners never answer the same path. Their spaces may not
// overlap, and a route may not reach outside its owner's space (where, more
// general than another owner's routes, ServeMux would quietly give it every
// request those do not match).
func TestSurfacesThatOverlapAreRefused(t *testing.T) {
	identity := httproute.Space{Owner: "identity", Paths: []string{"/v1/pats", "/v1/pats/", "/oauth/"}}
	ledger := httproute.Space{Owner: "ledger", Paths: []string{"/v1/ledger", "/v1/ledger/"}}
	cases := []struct {
		name     string
		surfaces []httproute.Surface
		want     []string // in the error
	}{
		{"spaces overlap", []httproute.Surface{
			{Space: identity},
			{Space: httproute.Space{Owner: "ledger", Paths: []string{"/v1/ledger", "/oauth/x/ledger"}}},
		}, []string{`identity's "/oauth/"`, `ledger's "/oauth/x/ledger"`}},
		{"same path", []httproute.Surface{
			{Space: identity},
			{Space: httproute.Space{Owner: "ledger", Paths: []string{"/v1/pats"}}, Absent: ok},
		}, []string{`identity's "/v1/pats"`, `ledger's "/v1/pats"`}},
		{"route outside its space, more general", []httproute.Surface{
			{Space: identity, Routes: []httproute.Route{route(http.MethodGet, "/v1/pats")}},
			{Space: ledger, Routes: []httproute.Route{route(http.MethodGet, "/v1/")}},
		}, []string{`ledger's route "GET /v1/"`, "/v1/ledger"}},
		{"route outside its space, the same", []httproute.Surface{
			{Space: identity, Routes: []httproute.Route{route(http.MethodGet, "/v1/pats")}},
			{Space: ledger, Routes: []httproute.Route{route(http.MethodGet, "/v1/pats")}},
		}, []string{`ledger's route "GET /v1/pats"`}},
		{"routes of one owner conflict", []httproute.Surface{
			{Space: identity, Routes: []httproute.Route{route("", "/oauth/{t}/token"), route("", "/oauth/a/{p}")}},
		}, []string{"/oauth/{t}/token", "/oauth/a/{p}", "conflicts"}},
		{"owner twice", []httproute.Surface{{Space: ledger}, {Space: httproute.Space{Owner: "ledger", Paths: []string{"/x"}}}},
			[]string{"ledger declares two spaces"}},
		{"wildcard in a space", []httproute.Surface{{Space: httproute.Space{Owner: "a", Paths: []string{"/x/{id}"}}}},
			[]string{"wildcard"}},
		{"absent with routes", []httproute.Surface{{Space: ledger, Absent: ok, Routes: []httproute.Route{route(http.MethodGet, "/v1/ledger")}}},
			[]string{"absent"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			err := httproute.MountSurfaces(mux, tc.surfaces)
			if err == nil {
				t.Fatal("MountSurfaces accepted surfaces that overlap")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/pats", nil))
			if rec.Code != http.StatusNotFound {
				t.Errorf("a refused plan left routes behind: %d", rec.Code)
			}
		})
	}
}

func TestMountSurfaces(t *testing.T) {
	gone := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	mux := http.NewServeMux()
	err := httproute.MountSurfaces(mux, []httproute.Surface{
		{Space: httproute.Space{Owner: "broker", Paths: []string{"/healthz"}}, Routes: []httproute.Route{route(http.MethodGet, "/healthz")}},
		{Space: httproute.Space{Owner: "ingress", Paths: []string{"/nlip", "/nlip/"}}, Absent: gone},
		{Space: httproute.Space{Owner: "policy", Paths: []string{"/v1/rules"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/healthz", http.StatusNoContent},
		// An absent owner's space answers whatever comes, body or not.
		{http.MethodPost, "/nlip", http.StatusServiceUnavailable},
		{http.MethodGet, "/nlip/ws", http.StatusServiceUnavailable},
		// A present owner without routes there: nothing is served.
		{http.MethodGet, "/v1/rules", http.StatusNotFound},
		{http.MethodGet, "/elsewhere", http.StatusNotFound},
	} {
		var body io.Reader
		if tc.method == http.MethodPost {
			body = strings.NewReader("a body")
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, body))
		if rec.Code != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.want)
		}
	}
}
