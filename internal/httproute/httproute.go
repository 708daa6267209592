// Package httproute declares HTTP routes with what they accept, and mounts
// them so that what they declare is enforced.
//
// A [Route] names its method and path pattern (http.ServeMux syntax), its
// handler, who may call it and the largest request body it takes. [Mount]
// refuses a route without a body limit: a route that takes no body says so
// with [NoBody]. Every request then passes a wrapper that
//
//   - answers 413 (code body_too_large) before reading anything when the
//     Content-Length announces more than the limit, and closes the
//     connection after the answer, so the rest is never read;
//   - caps a body of unknown length (chunked) at the limit while the handler
//     reads it (http.MaxBytesReader: the read fails, the connection closes);
//   - refuses any body on a NoBody route, and on GET and HEAD requests of
//     every route (they carry no meaning in a body);
//   - manages the connection's deadlines per route (see below).
//
// # Deadlines
//
// The server's ReadTimeout bounds reading the header and the body;
// WriteTimeout bounds writing the answer. Once a body has been read to its
// end (at once for a request without one), net/http clears the read
// deadline, so a handler may wait longer than the read timeout (a send
// waiting for policy's decision); the write deadline still applies.
//
// A Streaming route (a WebSocket, a streamed export) lives longer than any
// fixed write timeout. Its wrapper turns the write deadline into one of
// progress: every Write or Flush must complete within the server's
// WriteTimeout from when it starts, so a client that stops reading is
// dropped while one that reads keeps its stream. A WebSocket's Hijack clears
// the connection's deadlines (net/http does); the WebSocket handler bounds
// itself (idle timeout, read limits).
//
// # One surface
//
// Every owner of public paths (the broker, each service) declares a
// [Space]: the exact paths and subtrees it holds, whether or not it runs in
// the process. [MountSurfaces] puts several owners' routes on one mux and
// refuses spaces that overlap, a route outside its owner's space and routes
// in conflict, so that no two owners ever answer the same path; an owner
// that does not serve in the process answers its whole space with its
// Absent handler.
package httproute

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// Caller says who may call a route.
type Caller string

// Callers.
const (
	// Public routes need no credential (sign-in, the OAuth endpoints,
	// discovery documents, probes).
	Public Caller = "public"
	// Agent routes need an agent's bearer credential.
	Agent Caller = "agent"
	// Person routes need a signed-in person's session.
	Person Caller = "person"
	// AgentOrPerson routes take either (a person's ledger).
	AgentOrPerson Caller = "agent-or-person"
	// Operator routes need an operator token.
	Operator Caller = "operator"
	// Broker routes need a remote broker's signed request (federation's
	// Authorization header); an agent's or a person's credential means
	// nothing there.
	Broker Caller = "broker"
)

func (c Caller) valid() bool {
	switch c {
	case Public, Agent, Person, AgentOrPerson, Operator, Broker:
		return true
	}
	return false
}

// NoBody is the BodyLimit of a route that takes no request body: any body is
// refused with 413.
const NoBody int64 = -1

// Body limits shared by several routes.
const (
	// FormBody bounds the urlencoded forms of the OAuth endpoints and
	// sign-out: a handful of parameters, tokens and URLs.
	FormBody int64 = 16 << 10
)

// CodeBodyTooLarge is the error code of a refused body.
const CodeBodyTooLarge = "body_too_large"

// Route is one HTTP route.
type Route struct {
	// Method is the HTTP method, or "" for a handler that takes several
	// (and answers a wrong one itself).
	Method string
	// Pattern is the http.ServeMux path pattern, without the method.
	Pattern string
	Handler http.Handler
	Caller  Caller
	// BodyLimit is the largest request body in bytes, or NoBody. Zero is
	// refused by Mount: every route says what it takes.
	BodyLimit int64
	// Streaming routes outlive the write timeout (WebSocket, streamed
	// export): see the package documentation.
	Streaming bool
	// TooLarge, if set, answers a refused body in the route's own protocol
	// (an NLIP message, an OAuth error). It must not read the body. By
	// default the answer is a problem (httpjson) with code body_too_large.
	TooLarge func(w http.ResponseWriter, r *http.Request, limit int64)
}

// Key is the route's method and pattern as http.ServeMux reads them.
func (rt Route) Key() string {
	if rt.Method == "" {
		return rt.Pattern
	}
	return rt.Method + " " + rt.Pattern
}

// Limit is the most body bytes a request may carry: 0 for NoBody.
func (rt Route) Limit() int64 { return max(rt.BodyLimit, 0) }

// Check reports what is wrong with the route's declaration.
func (rt Route) Check() error {
	switch {
	case rt.Pattern == "" || !strings.HasPrefix(rt.Pattern, "/"):
		return fmt.Errorf("httproute: route %q: the pattern must be a path starting with /", rt.Key())
	case strings.ContainsAny(rt.Method, " /"):
		return fmt.Errorf("httproute: route %q: bad method %q", rt.Key(), rt.Method)
	case rt.Handler == nil:
		return fmt.Errorf("httproute: route %q has no handler", rt.Key())
	case !rt.Caller.valid():
		return fmt.Errorf("httproute: route %q: unknown caller %q", rt.Key(), rt.Caller)
	case rt.BodyLimit == 0:
		return fmt.Errorf("httproute: route %q has no body limit (use NoBody if it takes none)", rt.Key())
	case rt.BodyLimit < 0 && rt.BodyLimit != NoBody:
		return fmt.Errorf("httproute: route %q: body limit %d is negative (use NoBody)", rt.Key(), rt.BodyLimit)
	case (rt.Method == http.MethodGet || rt.Method == http.MethodHead) && rt.BodyLimit != NoBody:
		return fmt.Errorf("httproute: route %q: a %s route takes no body (use NoBody)", rt.Key(), rt.Method)
	}
	return nil
}

// Mount registers routes on mux, each behind its limits. It refuses (and
// registers nothing of) a list with an invalid route, a key given twice or
// patterns http.ServeMux finds in conflict.
func Mount(mux *http.ServeMux, routes []Route) error { return mount(mux, routes, nil) }

// entry is one pattern to register and its handler.
type entry struct {
	key string
	h   http.Handler
}

// mount registers routes behind their limits and raw entries as they are.
func mount(mux *http.ServeMux, routes []Route, raw []entry) error {
	seen := map[string]bool{}
	entries := make([]entry, 0, len(routes)+len(raw))
	for _, rt := range routes {
		if err := rt.Check(); err != nil {
			return err
		}
		if seen[rt.Key()] {
			return fmt.Errorf("httproute: route %q is declared twice", rt.Key())
		}
		seen[rt.Key()] = true
		entries = append(entries, entry{rt.Key(), Wrap(rt)})
	}
	entries = append(entries, raw...)
	// ServeMux panics on conflicting patterns; try them on a scratch mux
	// first so that mux is left untouched.
	if err := register(http.NewServeMux(), entries); err != nil {
		return err
	}
	return register(mux, entries)
}

func register(mux *http.ServeMux, entries []entry) (err error) {
	var cur string
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("httproute: route %q: %v", cur, p)
		}
	}()
	for _, e := range entries {
		cur = e.key
		mux.Handle(e.key, e.h)
	}
	return nil
}

// Handler mounts routes on a new mux. It panics on an invalid list: route
// lists are static declarations, and a wrong one is a programming error
// that every test run shows.
func Handler(routes []Route) *http.ServeMux {
	mux := http.NewServeMux()
	if err := Mount(mux, routes); err != nil {
		panic(err)
	}
	return mux
}

// Wrap is rt's handler behind its limits and deadlines.
func Wrap(rt Route) http.Handler {
	refuse := rt.TooLarge
	if refuse == nil {
		refuse = WriteTooLarge
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := rt.Limit()
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			limit = 0
		}
		if r.ContentLength > limit || (limit == 0 && r.ContentLength < 0 && !emptyBody(r)) {
			// Unread bytes stay on the connection: close it after the
			// answer rather than reading them to reach the next request.
			w.Header().Set("Connection", "close")
			refuse(w, r, limit)
			return
		}
		if limit == 0 {
			r.Body = http.NoBody
		} else {
			r.Body = http.MaxBytesReader(w, r.Body, limit)
		}
		if rt.Streaming {
			srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
			if srv != nil && srv.WriteTimeout > 0 {
				w = newProgressWriter(w, http.NewResponseController(w), srv.WriteTimeout)
			}
		}
		rt.Handler.ServeHTTP(w, r)
	})
}

// emptyBody reads one byte of a body of unknown length: true when there is
// none. A slow sender is bounded by the server's read deadline.
func emptyBody(r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody {
		return true
	}
	var b [1]byte
	n, err := io.ReadFull(r.Body, b[:])
	return n == 0 && errors.Is(err, io.EOF)
}

// WriteTooLarge is the default answer to a refused body: a problem with
// code body_too_large.
func WriteTooLarge(w http.ResponseWriter, _ *http.Request, limit int64) {
	msg := "the request body exceeds " + strconv.FormatInt(limit, 10) + " bytes"
	if limit == 0 {
		msg = "this request takes no body"
	}
	httpjson.WriteError(w, &httpjson.Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Message: msg})
}
