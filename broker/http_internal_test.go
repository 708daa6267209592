package broker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/service"
)

// fakeService is a service that serves the routes it is given.
type fakeService struct {
	service.Base
	routes []httproute.Route
}

func (f *fakeService) Start(context.Context) error        { return nil }
func (f *fakeService) RegisterGRPC(grpc.ServiceRegistrar) {}
func (f *fakeService) HTTPRoutes() []httproute.Route      { return f.routes }

func fake(role alpv1.Role, patterns ...string) *fakeService {
	f := &fakeService{Base: service.NewBase(role, service.Deps{})}
	for _, p := range patterns {
		f.routes = append(f.routes, httproute.Route{Method: http.MethodGet, Pattern: p, Caller: httproute.Public, BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })})
	}
	return f
}

// TestBrokerRefusesServicesWhoseRoutesOverlap: the broker mounts every
// local service's routes on one mux (mountHTTP, which New and the end of
// start call, so that Run fails) and refuses to start when two services
// would answer the same path. A ledger declaring GET /v1/ would otherwise
// take every /v1 path identity does not route (ServeMux lets the more
// specific pattern win and finds no conflict).
func TestBrokerRefusesServicesWhoseRoutesOverlap(t *testing.T) {
	newBroker := func() *Broker {
		b := &Broker{ops: newOpsAuth(nil, OpsLimits{}), spaces: urlSpaces()}
		if err := b.mountHTTP(nil); err != nil {
			t.Fatalf("the URL plan is refused: %v", err)
		}
		return b
	}
	identity := fake(alpv1.Role_ROLE_IDENTITY, "/v1/pats")
	cases := []struct {
		name   string
		spaces func([]httproute.Space) []httproute.Space
		svcs   []service.Service
		want   []string
	}{
		{"a route more general than another service's", nil,
			[]service.Service{identity, fake(alpv1.Role_ROLE_LEDGER, "/v1/ledger", "/v1/")}, []string{`ledger's route "GET /v1/"`}},
		{"the same route", nil,
			[]service.Service{identity, fake(alpv1.Role_ROLE_INGRESS, "/v1/pats")}, []string{`ingress's route "GET /v1/pats"`}},
		{"spaces that overlap", func(sp []httproute.Space) []httproute.Space {
			for i := range sp {
				if sp[i].Owner == "ledger" {
					sp[i].Paths = []string{"/v1/"}
				}
			}
			return sp
		}, []service.Service{identity}, []string{"overlaps", `ledger's "/v1/"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker()
			if tc.spaces != nil {
				b.spaces = tc.spaces(b.spaces)
			}
			err := b.mountHTTP(tc.svcs)
			if err == nil {
				t.Fatal("the broker mounted services whose routes overlap")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			// What Handler served before stays: the services' paths still
			// answer that they have not started.
			rec := httptest.NewRecorder()
			b.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/pats", nil))
			if rec.Code != http.StatusServiceUnavailable {
				t.Errorf("GET /v1/pats after a refused mount: %d, want 503", rec.Code)
			}
		})
	}

	b := newBroker()
	if err := b.mountHTTP([]service.Service{identity, fake(alpv1.Role_ROLE_LEDGER, "/v1/ledger")}); err != nil {
		t.Fatalf("services that do not overlap were refused: %v", err)
	}
	for path, want := range map[string]int{"/v1/pats": 204, "/v1/ledger": 204, "/nlip/": 503, "/v1/ledger/x": 404, "/v1/other": 404} {
		rec := httptest.NewRecorder()
		b.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, want)
		}
	}
}

// TestURLPlanIsDocumented: the URL plan of docs/architecture.md lists
// every path of the broker's and the services' URL spaces with its owner,
// and no path the code does not hold, so the plan says what the code does.
func TestURLPlanIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, plan, ok := strings.Cut(string(doc), "\n## URL plan")
	if !ok {
		t.Fatal("docs/architecture.md has no URL plan section")
	}
	plan, _, _ = strings.Cut(plan, "\n## ")
	documented := map[string]string{} // path → owner
	for line := range strings.Lines(plan) {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		owner := strings.TrimSpace(cells[2])
		for i, part := range strings.Split(cells[1], "`") {
			if i%2 == 1 {
				documented[part] = owner
			}
		}
	}
	held := map[string]string{}
	for _, sp := range append(urlSpaces(), ownSpace()) {
		for _, p := range sp.Paths {
			held[p] = sp.Owner
			if documented[p] != sp.Owner {
				t.Errorf("the URL plan gives %s to %q, the code to %s", p, documented[p], sp.Owner)
			}
		}
	}
	for p, owner := range documented {
		if _, ok := held[p]; !ok {
			t.Errorf("the URL plan gives %s to %s, but no URL space holds it", p, owner)
		}
	}
}
