package broker

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/webui"
	"github.com/alpd-project/alpd/services/approvals"
	"github.com/alpd-project/alpd/services/federation"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ledger"
	"github.com/alpd-project/alpd/services/policy"
)

// Handler serves the broker's HTTP endpoints: /healthz (the process is
// alive: 503 once its NATS connection is closed for good), /readyz (every
// local service's streams and consumers are up; ?verbose=1, for operators
// only, adds per-service detail and the streams), /metrics when a Gatherer
// was injected, POST /v1/ops/trace and POST /v1/ops/policy/push (operator
// token, rate limited), and the public routes of the services running here
// (service.HTTPRoutes), all on one mux with their callers and body limits
// (httproute). The rest of every
// service's URL space answers 503 <service>_unavailable: the service runs
// in another process, or has not started.
func (b *Broker) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.http.Load().mux.ServeHTTP(w, r)
	})
}

// Routes are every HTTP route this process serves: the broker's own and,
// once started, those of the services running here, each with who may
// call it and its body limit.
func (b *Broker) Routes() []httproute.Route { return slices.Clone(b.http.Load().routes) }

// httpSurface is what Handler serves: the mux and the routes on it.
type httpSurface struct {
	mux    *http.ServeMux
	routes []httproute.Route
}

// urlSpaces are the services' parts of the public URL space, each declared
// by the service's own package: the URL plan of docs/architecture.md.
func urlSpaces() []httproute.Space {
	return []httproute.Space{identity.URLSpace(), ingress.URLSpace(), policy.URLSpace(),
		federation.URLSpace(), ledger.URLSpace(), approvals.URLSpace()}
}

// ownSpace is the broker's own part of the URL space: probes, metrics and
// the operators' endpoints.
func ownSpace() httproute.Space {
	return httproute.Space{Owner: "broker", Paths: []string{"/healthz", "/readyz", "/metrics", "/v1/ops/", webui.PathAssets}}
}

// ownRoutes are the broker's own endpoints.
func (b *Broker) ownRoutes() []httproute.Route {
	routes := []httproute.Route{
		{Method: http.MethodGet, Pattern: "/healthz", Caller: httproute.Public, BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(b.healthz)},
		{Method: http.MethodGet, Pattern: "/readyz", Handler: http.HandlerFunc(b.readyz), Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Method: http.MethodPost, Pattern: "/v1/ops/trace", Handler: b.ops.wrap(b.traceHandler), Caller: httproute.Operator, BodyLimit: httproute.NoBody},
		{Method: http.MethodPost, Pattern: PathPolicyPush, Handler: b.ops.wrap(b.policyPush), Caller: httproute.Operator, BodyLimit: policyPushBody},
		{Method: http.MethodPost, Pattern: PathPolicyCheck, Handler: b.ops.wrap(b.policyCheck), Caller: httproute.Operator, BodyLimit: policyCheckBody},
	}
	// The pages' style sheet, which every service's pages link.
	routes = append(routes, webui.Routes()...)
	if b.deps.Gatherer != nil {
		routes = append(routes, httproute.Route{Method: http.MethodGet, Pattern: "/metrics", Caller: httproute.Public,
			BodyLimit: httproute.NoBody, Handler: promhttp.HandlerFor(b.deps.Gatherer, promhttp.HandlerOpts{})})
	}
	return routes
}

// mountHTTP puts on one mux the broker's own routes, the routes of the
// started services svcs, and a 503 <service>_unavailable in the space of
// every other service. It refuses spaces that overlap and a route outside
// its service's space or in conflict with another (httproute.MountSurfaces),
// so that no two services ever answer the same path; on success Handler
// serves the new mux.
func (b *Broker) mountHTTP(svcs []service.Service) error {
	local := map[string][]httproute.Route{}
	for _, s := range svcs {
		local[envelope.ServiceName(s.Role())] = s.HTTPRoutes()
	}
	own := b.ownRoutes()
	surfaces := []httproute.Surface{{Space: ownSpace(), Routes: own}}
	routes := own
	for _, sp := range b.spaces {
		rts, ok := local[sp.Owner]
		delete(local, sp.Owner)
		if !ok {
			surfaces = append(surfaces, httproute.Surface{Space: sp, Absent: unavailable(sp.Owner)})
			continue
		}
		surfaces = append(surfaces, httproute.Surface{Space: sp, Routes: rts})
		routes = append(routes, rts...)
	}
	for name, rts := range local {
		if len(rts) > 0 {
			return fmt.Errorf("broker: service %s has HTTP routes but no URL space", name)
		}
	}
	mux := http.NewServeMux()
	if err := httproute.MountSurfaces(mux, surfaces); err != nil {
		return fmt.Errorf("broker: HTTP routes: %w", err)
	}
	b.http.Store(&httpSurface{mux: mux, routes: routes})
	return nil
}

// unavailable answers in the space of a service that does not serve here.
func unavailable(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, name+"_unavailable",
			"the %s service does not run in this process or has not started", name))
	})
}

// healthz answers whether the process can still work. A NATS connection
// the client closed for good (it does so after a protocol error from the
// server, whatever the reconnect settings) never comes back by itself, so
// the liveness probe must fail and the process be restarted; while the
// client is only reconnecting the process is alive, just not ready.
func (b *Broker) healthz(w http.ResponseWriter, _ *http.Request) {
	if nc := b.deps.NATS; nc.IsClosed() {
		msg := "the NATS connection is closed and will not reconnect; restart the process"
		if err := nc.LastError(); err != nil {
			msg += " (last error: " + err.Error() + ")"
		}
		httpjson.WriteError(w, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: "nats_closed", Message: msg})
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ServiceStatus is one service's line in /readyz.
type ServiceStatus struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
	Error string `json:"error,omitempty"`
	Lag   uint64 `json:"lag"`
	// GRPC is "ok" when a Ping through the service's gRPC API answered ready.
	GRPC string `json:"grpc"`
}

// StreamStatus describes one stream the broker's services own.
type StreamStatus struct {
	Name      string   `json:"name"`
	Owner     string   `json:"owner"`
	Retention string   `json:"retention"`
	MaxAge    string   `json:"max_age"`
	Subjects  []string `json:"subjects,omitempty"`
	Sources   []string `json:"sources,omitempty"`
	// AppendOnly streams deny deletes and purges.
	AppendOnly bool `json:"append_only,omitempty"`
}

// Readiness is the /readyz answer.
type Readiness struct {
	Ready    bool            `json:"ready"`
	Error    string          `json:"error,omitempty"`
	Broker   string          `json:"broker"`
	Services []ServiceStatus `json:"services,omitempty"`
	Streams  []StreamStatus  `json:"streams,omitempty"`
}

// readyz answers whether the local services are ready. Plain /readyz is
// for probes and says only that (and why not). The verbose form lists
// the services, their errors and lag and the streams' layout, and pings
// every service: it is an operator's diagnostic (alpctl status), so it
// needs an operator token. It is not rate limited per operator like
// traces are; bad tokens share the failure limiter.
func (b *Broker) readyz(w http.ResponseWriter, r *http.Request) {
	verbose := r.URL.Query().Get("verbose") != ""
	if verbose {
		if _, ok := b.ops.admit(w, r, "the verbose /readyz is for operators: send an operator token "+
			"(Authorization: Bearer alpop_…; alpctl status --operator-token); plain /readyz needs none"); !ok {
			return
		}
	}
	res := Readiness{Ready: true, Broker: b.cfg.Name}
	if err := b.Ready(); err != nil {
		res.Ready, res.Error = false, err.Error()
	}
	if verbose {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		res.Services = b.ServiceStatuses(ctx)
		res.Streams = b.StreamStatuses()
	}
	status := http.StatusOK
	if !res.Ready {
		status = http.StatusServiceUnavailable
	}
	httpjson.Write(w, status, res)
}

// ServiceStatuses reports every local service, pinging each through gRPC.
func (b *Broker) ServiceStatuses(ctx context.Context) []ServiceStatus {
	select {
	case <-b.started:
	default:
		return nil
	}
	b.mu.Lock()
	svcs := append(b.services[:0:0], b.services...)
	b.mu.Unlock()
	var out []ServiceStatus
	for _, s := range svcs {
		st := ServiceStatus{Name: envelope.ServiceName(s.Role()), Ready: s.Ready() == nil, Lag: s.Lag()}
		if err := s.Ready(); err != nil {
			st.Error = err.Error()
		}
		st.GRPC = b.pingStatus(ctx, s.Role())
		out = append(out, st)
	}
	return out
}

// StreamStatuses lists the streams the local services own, from the table.
func (b *Broker) StreamStatuses() []StreamStatus {
	var out []StreamStatus
	for _, s := range streams.Table() {
		owner := envelope.ServiceName(s.Owner)
		if !b.Runs(owner) {
			continue
		}
		spec := s.Spec(b.cfg.Tenants, b.cfg.Limits)
		cfg := b.bus.Config(spec)
		st := StreamStatus{Name: cfg.Name, Owner: owner, Retention: cfg.Retention.String(),
			MaxAge: "unlimited", Subjects: cfg.Subjects, AppendOnly: cfg.DenyDelete && cfg.DenyPurge}
		if cfg.MaxAge > 0 {
			st.MaxAge = cfg.MaxAge.String()
		}
		for _, src := range cfg.Sources {
			st.Sources = append(st.Sources, src.Name+" "+bus.SourceFilter(src))
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
