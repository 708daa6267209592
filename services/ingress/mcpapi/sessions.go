package mcpapi

import (
	"context"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/alpd-project/alpd/internal/agentauth"
)

// Each session gets an mcp.Server of its own, made for the agent that
// opened it. The SDK sends a resource's update to every session of the
// server that subscribed to it, so one server per session keeps one
// agent's inbox news on that agent's sessions and a stuck stream stalls
// only its own session's watcher.

// session is one MCP session's server and the agent it was opened for.
type session struct {
	api *API
	srv *mcp.Server
	// agent is nil for the base server, which serves no session.
	agent *agentauth.Principal

	mu sync.Mutex
	// watching: the session's inbox watcher runs.
	watching bool
}

// serverFor is the SDK's getServer: the server of the session a request
// opens (made once per request), else the base server, which the SDK
// consults only for the protocol versions it speaks.
func (a *API) serverFor(r *http.Request) *mcp.Server {
	slot, _ := r.Context().Value(slotKey{}).(*sessionSlot)
	if slot == nil {
		return a.base.srv
	}
	if slot.server == nil {
		p := slot.principal
		slot.server = a.newServer(&p)
	}
	return slot.server.srv
}

// settle runs after a request that may have opened a session: the
// session, if there is one, holds its slot until it ends; otherwise the
// slot is free again.
func (a *API) settle(slot *sessionSlot) {
	if slot.server != nil {
		for ss := range slot.server.srv.Sessions() {
			a.sessions.opened(slot.tracked, ss)
			go func() {
				_ = ss.Wait()
				a.sessions.release(slot.tracked)
			}()
			return
		}
	}
	a.sessions.release(slot.tracked)
}

// newServer makes the server of one session of agent p (nil: the base
// server).
func (a *API) newServer(p *agentauth.Principal) *session {
	s := &session{api: a, agent: p}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "alpd", Title: "ALP broker", Version: buildVersion(), WebsiteURL: a.cfg.PublicURL},
		&mcp.ServerOptions{
			Instructions:       Instructions,
			Logger:             a.log,
			SchemaCache:        a.schemas,
			InitializedHandler: s.initialized,
			SubscribeHandler:   s.subscribe,
			UnsubscribeHandler: s.unsubscribe,
			Capabilities: &mcp.ServerCapabilities{
				//lint:ignore SA1019 announced for the inbox's log message (see announce)
				Logging:   &mcp.LoggingCapabilities{},
				Tools:     &mcp.ToolCapabilities{},
				Resources: &mcp.ResourceCapabilities{Subscribe: true},
			},
		})
	for _, t := range a.tools {
		t.add(s.srv)
	}
	a.addResources(s.srv)
	return s
}

// sessionLimits bound the sessions of each agent and of each person. A
// session past a bound does not refuse the agent (clients that reconnect
// without ending their old session would lock themselves out for the
// idle timeout); it closes the agent's (or person's) least recently used
// session instead.
type sessionLimits struct {
	mu                  sync.Mutex
	maxAgent, maxPerson int
	byAgent, byPerson   map[string][]*tracked
	byID                map[string]*tracked
}

// tracked is one session counted against its agent and person; ss is nil
// while the session is being opened.
type tracked struct {
	agent, person string
	ss            *mcp.ServerSession
	used          time.Time
	gone          bool
}

func newSessionLimits(maxAgent, maxPerson int) *sessionLimits {
	return &sessionLimits{maxAgent: maxAgent, maxPerson: maxPerson,
		byAgent: map[string][]*tracked{}, byPerson: map[string][]*tracked{}, byID: map[string]*tracked{}}
}

func personKey(p agentauth.Principal) string { return p.Tenant + "/" + p.PersonID }

// reserve counts a session p is opening and closes the sessions that it
// pushes past a bound.
func (l *sessionLimits) reserve(p agentauth.Principal) *tracked {
	t := &tracked{agent: userID(p), person: personKey(p), used: time.Now()}
	l.mu.Lock()
	l.byAgent[t.agent] = append(l.byAgent[t.agent], t)
	l.byPerson[t.person] = append(l.byPerson[t.person], t)
	var evict []*mcp.ServerSession
	for _, over := range []struct {
		m   map[string][]*tracked
		key string
		max int
	}{{l.byAgent, t.agent, l.maxAgent}, {l.byPerson, t.person, l.maxPerson}} {
		for len(over.m[over.key]) > over.max {
			lru := leastRecentlyUsed(over.m[over.key])
			if lru == nil {
				break // the others are being opened: they count once open
			}
			evict = append(evict, lru.ss)
			l.forget(lru)
		}
	}
	l.mu.Unlock()
	for _, ss := range evict {
		_ = ss.Close()
	}
	return t
}

func leastRecentlyUsed(ts []*tracked) *tracked {
	var lru *tracked
	for _, t := range ts {
		if t.ss != nil && (lru == nil || t.used.Before(lru.used)) {
			lru = t
		}
	}
	return lru
}

// opened records the session t was reserved for.
func (l *sessionLimits) opened(t *tracked, ss *mcp.ServerSession) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.gone {
		return
	}
	t.ss, t.used = ss, time.Now()
	l.byID[ss.ID()] = t
}

// touch marks a session used by a request.
func (l *sessionLimits) touch(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.byID[id]; t != nil {
		t.used = time.Now()
	}
}

// release forgets t: its session ended, or was never opened.
func (l *sessionLimits) release(t *tracked) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forget(t)
}

func (l *sessionLimits) forget(t *tracked) {
	if t.gone {
		return
	}
	t.gone = true
	remove := func(m map[string][]*tracked, k string) {
		list := slices.DeleteFunc(m[k], func(x *tracked) bool { return x == t })
		if len(list) == 0 {
			delete(m, k)
		} else {
			m[k] = list
		}
	}
	remove(l.byAgent, t.agent)
	remove(l.byPerson, t.person)
	if t.ss != nil {
		delete(l.byID, t.ss.ID())
	}
}

// serveStream serves a GET (the session's own SSE stream) with a
// heartbeat: an SSE comment line whenever the stream was quiet for
// Heartbeat. Every write must finish within the server's write timeout
// (httproute's streaming deadline); the heartbeat keeps a quiet stream
// alive, and a client that stopped reading fails the next write, which
// ends the request instead of holding it.
func (a *API) serveStream(next http.Handler, w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	hw := &heartbeatWriter{ResponseWriter: w, rc: http.NewResponseController(w), last: time.Now()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(a.cfg.Heartbeat / 2)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := hw.beat(a.cfg.Heartbeat); err != nil {
					cancel()
					return
				}
			}
		}
	}()
	next.ServeHTTP(hw, r.WithContext(ctx))
	cancel()
	<-done
}

// heartbeatWriter serializes the SDK's writes with the heartbeat's, which
// it writes only between events (the SDK writes each event with one
// Write) and only once an SSE stream has begun.
type heartbeatWriter struct {
	http.ResponseWriter
	rc *http.ResponseController

	mu    sync.Mutex
	wrote bool
	sse   bool
	last  time.Time
}

func (h *heartbeatWriter) header(status int) {
	if !h.wrote {
		h.wrote = true
		h.sse = status == http.StatusOK && strings.HasPrefix(h.Header().Get("Content-Type"), "text/event-stream")
	}
}

func (h *heartbeatWriter) WriteHeader(status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.header(status)
	h.ResponseWriter.WriteHeader(status)
}

func (h *heartbeatWriter) Write(b []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.header(http.StatusOK)
	h.last = time.Now()
	return h.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls.
func (h *heartbeatWriter) FlushError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.header(http.StatusOK)
	return h.rc.Flush()
}

// Flush serves handlers that assert http.Flusher.
func (h *heartbeatWriter) Flush() { _ = h.FlushError() }

// Unwrap lets http.ResponseController reach the connection.
func (h *heartbeatWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h *heartbeatWriter) beat(every time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.sse || time.Since(h.last) < every {
		return nil
	}
	h.last = time.Now()
	if _, err := h.ResponseWriter.Write([]byte(": keepalive\n\n")); err != nil {
		return err
	}
	return h.rc.Flush()
}

// buildVersion is the module version alpd was built as ("devel" in a
// work tree), for the server's Implementation.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
