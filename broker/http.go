package broker

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/streams"
)

// Handler serves the broker's HTTP endpoints: /healthz (the process is
// alive: 503 once its NATS connection is closed for good), /readyz (every
// local service's streams and consumers are up; ?verbose=1, for operators
// only, adds per-service detail and the streams), /metrics when a Gatherer
// was injected, POST /v1/ops/trace (operator token, rate limited), and the
// public paths of the services running here. Each service mounts its own
// routes with their body limits (httproute); this handler only picks the
// service by path prefix.
func (b *Broker) Handler() http.Handler {
	mux := httproute.Handler(b.ownRoutes())
	// Each service's public paths go to the service where it runs here; in
	// split mode route them to that service's processes.
	for _, svc := range b.servicePaths() {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next := svc.handler()
			if next == nil {
				writeError(w, http.StatusServiceUnavailable, svc.service+"_unavailable",
					"the "+svc.service+" service does not run in this process or has not started")
				return
			}
			next.ServeHTTP(w, r)
		})
		for _, p := range svc.paths {
			mux.Handle(p, h)
		}
	}
	return mux
}

// ownRoutes are the broker's own endpoints.
func (b *Broker) ownRoutes() []httproute.Route {
	routes := []httproute.Route{
		{Method: http.MethodGet, Pattern: "/healthz", Caller: httproute.Public, BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(b.healthz)},
		{Method: http.MethodGet, Pattern: "/readyz", Handler: http.HandlerFunc(b.readyz), Caller: httproute.Public, BodyLimit: httproute.NoBody},
		{Method: http.MethodPost, Pattern: "/v1/ops/trace", Handler: b.ops.wrap(b.traceHandler), Caller: httproute.Operator, BodyLimit: httproute.NoBody},
	}
	if b.deps.Gatherer != nil {
		routes = append(routes, httproute.Route{Method: http.MethodGet, Pattern: "/metrics", Caller: httproute.Public,
			BodyLimit: httproute.NoBody, Handler: promhttp.HandlerFor(b.deps.Gatherer, promhttp.HandlerOpts{})})
	}
	return routes
}

// servicePath is a service's public path prefixes and its handler here
// (nil when it does not run in this process or has not started).
type servicePath struct {
	service string
	paths   []string
	handler func() http.Handler
	routes  func() []httproute.Route
}

func (b *Broker) servicePaths() []servicePath {
	return []servicePath{
		// People's sign-in, the agents' authorization server, PATs.
		{"identity", []string{"/signin", "/signin/", "/signout", "/oauth/", "/v1/admin/", "/v1/pats", "/v1/pats/", "/.well-known/"},
			func() http.Handler {
				if id := b.Identity(); id != nil {
					return id.Handler()
				}
				return nil
			},
			func() []httproute.Route {
				if id := b.Identity(); id != nil {
					return id.Routes()
				}
				return nil
			}},
		// Agents' NLIP door.
		{"ingress", []string{"/nlip", "/nlip/"},
			func() http.Handler {
				if api := b.nlipAPI(); api != nil {
					return api
				}
				return nil
			},
			func() []httproute.Route {
				if api := b.nlipAPI(); api != nil {
					return api.Routes()
				}
				return nil
			}},
		// A person's ledger: read and prove.
		{"ledger", []string{"/v1/ledger", "/v1/ledger/"}, b.ledgerAPI, b.ledgerRoutes},
	}
}

// Routes are every HTTP route this process serves once started: the
// broker's own and those of the services running here, each with who may
// call it and its body limit.
func (b *Broker) Routes() []httproute.Route {
	routes := b.ownRoutes()
	for _, svc := range b.servicePaths() {
		routes = append(routes, svc.routes()...)
	}
	return routes
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
		writeError(w, http.StatusServiceUnavailable, "nats_closed", msg)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
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
	writeJSON(w, status, res)
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
