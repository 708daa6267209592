package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/alpd-project/alpd/broker"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/natstest"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

type connections struct {
	Pending     []relationships.Connection `json:"pending"`
	Connections []relationships.Connection `json:"connections"`
}

type blocks struct {
	Blocks []relationships.Target `json:"blocks"`
}

// A person lists the requests made of them, accepts, declines and blocks,
// and keeps a block list, with their web session; each refusal answers
// its code and stores nothing.
func TestPersonConnections(t *testing.T) {
	s := newSite(t)
	ana, lee := s.signIn("ana"), s.signIn("lee")

	// The requests come from strangers' messages, decided by another
	// policy replica on the same stream.
	other, err := relationships.Open(context.Background(), s.b.Bus(), []string{tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	ctx := context.Background()
	bo, err := other.Request(ctx, tenant, relationships.Party{Address: "bo@other.example"}, ana.ID, "0190f1a2-0000-7000-8000-000000000001")
	if err != nil {
		t.Fatal(err)
	}
	fromLee, err := other.Request(ctx, tenant, relationships.Party{Person: lee.ID}, ana.ID, "0190f1a2-0000-7000-8000-000000000002")
	if err != nil {
		t.Fatal(err)
	}
	cy, err := other.Request(ctx, tenant, relationships.Party{Address: "cy@third.example"}, ana.ID, "0190f1a2-0000-7000-8000-000000000003")
	if err != nil {
		t.Fatal(err)
	}
	var list connections
	testkit.Eventually(t, 5*time.Second, func() error {
		list = connections{}
		a := ana.get("/v1/connections")
		a.decode(t, &list)
		if len(list.Pending) != 3 {
			return &httpError{a}
		}
		return nil
	}, "ana's three pending requests")

	var ans struct {
		Connection relationships.Connection `json:"connection"`
		Blocked    *relationships.Target    `json:"blocked"`
	}
	a := ana.write(http.MethodPost, "/v1/connections/"+bo.ID+"/accept", nil)
	want(t, "accept", a, http.StatusOK, "")
	if a.decode(t, &ans); ans.Connection.State != relationships.ConnAccepted {
		t.Fatalf("accept: %s", a)
	}
	// bo is at another broker: accepting also leaves a connection.accept/v1
	// from ana to bo, answering bo's request, for federation to send.
	testkit.Eventually(t, 5*time.Second, func() error { return notice(s, ana.ID, "bo@other.example", bo.EnvelopeID) }, "the notice to bo")
	a = ana.write(http.MethodPost, "/v1/connections/"+fromLee.ID+"/decline", nil)
	want(t, "decline", a, http.StatusOK, "")
	if a.decode(t, &ans); ans.Connection.State != relationships.ConnDeclined {
		t.Fatalf("decline: %s", a)
	}
	// A page's plain HTML form carries the CSRF token as a field.
	form := s.req(http.MethodPost, "/v1/connections/"+cy.ID+"/block", []byte(url.Values{"csrf": {ana.csrf}}.Encode()),
		"Origin", s.srv.URL, "Content-Type", "application/x-www-form-urlencoded")
	a = do(t, ana.c, form)
	want(t, "block with a form", a, http.StatusOK, "")
	if a.decode(t, &ans); ans.Blocked == nil || *ans.Blocked != (relationships.Target{Kind: relationships.TargetAddress, Value: "cy@third.example"}) {
		t.Fatalf("block: %s", a)
	}
	a = ana.get("/v1/connections")
	list = connections{}
	a.decode(t, &list)
	if len(list.Pending) != 0 || len(list.Connections) != 3 {
		t.Fatalf("after the answers: %s; want nothing pending (cy is blocked), three connections", a)
	}

	before := s.events()
	want(t, "accept without the CSRF token", ana.forged(http.MethodPost, "/v1/connections/"+cy.ID+"/accept", nil), http.StatusForbidden, "csrf_token_invalid")
	want(t, "accept with no session", s.anonymous(http.MethodPost, "/v1/connections/"+cy.ID+"/accept", nil), http.StatusUnauthorized, "signin_required")
	want(t, "accept someone else's request", lee.write(http.MethodPost, "/v1/connections/"+cy.ID+"/accept", nil), http.StatusNotFound, "connection_not_found")
	want(t, "accept an unknown connection", ana.write(http.MethodPost, "/v1/connections/cnope/accept", nil), http.StatusNotFound, "connection_not_found")
	want(t, "decline an accepted connection", ana.write(http.MethodPost, "/v1/connections/"+bo.ID+"/decline", nil), http.StatusConflict, "connection_state")
	want(t, "accept with a form's wrong token", do(t, ana.c, s.req(http.MethodPost, "/v1/connections/"+cy.ID+"/accept", []byte("csrf=nope"),
		"Origin", s.srv.URL, "Content-Type", "application/x-www-form-urlencoded")), http.StatusForbidden, "csrf_token_invalid")
	want(t, "accept with an oversized body", ana.write(http.MethodPost, "/v1/connections/"+cy.ID+"/accept", make([]byte, 17<<10)), http.StatusRequestEntityTooLarge, "body_too_large")
	want(t, "GET an answer", ana.get("/v1/connections/"+cy.ID+"/accept"), http.StatusMethodNotAllowed, "method_not_allowed")
	s.unchanged("refused answers", before)

	// The block list.
	var bl blocks
	a = ana.get("/v1/blocks")
	if a.decode(t, &bl); len(bl.Blocks) != 1 || bl.Blocks[0].Value != "cy@third.example" {
		t.Fatalf("GET /v1/blocks: %s", a)
	}
	a = ana.write(http.MethodPost, "/v1/blocks", []byte(`{"kind":"domain","value":"Spam.Example"}`), "Content-Type", "application/json")
	want(t, "block a domain", a, http.StatusOK, "")
	bl = blocks{}
	if a.decode(t, &bl); len(bl.Blocks) != 2 {
		t.Fatalf("after blocking a domain: %s", a)
	}
	before = s.events()
	want(t, "block an unknown kind", ana.write(http.MethodPost, "/v1/blocks", []byte(`{"kind":"planet","value":"mars"}`)), http.StatusBadRequest, "invalid_request")
	want(t, "block a bad address", ana.write(http.MethodPost, "/v1/blocks", []byte(`{"kind":"address","value":"not an address"}`)), http.StatusBadRequest, "invalid_request")
	want(t, "block oneself", ana.write(http.MethodPost, "/v1/blocks", []byte(`{"kind":"person","value":"`+ana.ID+`"}`)), http.StatusBadRequest, "invalid_request")
	want(t, "block with an unknown member", ana.write(http.MethodPost, "/v1/blocks", []byte(`{"kind":"domain","value":"x.example","why":"x"}`)), http.StatusBadRequest, "invalid_request")
	want(t, "block with no CSRF token", ana.forged(http.MethodPost, "/v1/blocks", []byte(`{"kind":"domain","value":"x.example"}`)), http.StatusForbidden, "csrf_token_invalid")
	want(t, "an oversized block", ana.write(http.MethodPost, "/v1/blocks", []byte(`{"kind":"domain","value":"`+strings.Repeat("a", 5000)+`"}`)), http.StatusRequestEntityTooLarge, "body_too_large")
	s.unchanged("refused blocks", before)
	a = ana.write(http.MethodDelete, "/v1/blocks/address/"+url.PathEscape("cy@third.example"), nil)
	want(t, "unblock", a, http.StatusOK, "")
	bl = blocks{}
	if a.decode(t, &bl); len(bl.Blocks) != 1 || bl.Blocks[0].Value != "spam.example" {
		t.Fatalf("after unblocking cy: %s", a)
	}
	// Unblocked, cy's request is pending again.
	list = connections{}
	a = ana.get("/v1/connections")
	if a.decode(t, &list); len(list.Pending) != 1 || list.Pending[0].ID != cy.ID {
		t.Fatalf("after unblocking: %s; want cy's request pending", a)
	}
}

type httpError struct{ a answer }

func (e *httpError) Error() string { return e.a.String() }

// Where identity does not run in the process (split mode), web sessions
// cannot be checked: the person and admin routes say so (503
// web_sessions_unavailable), and /v1/rules asks for a bearer token.
func TestWithoutIdentityInTheProcess(t *testing.T) {
	// Identity, ingress, federation and approvals run elsewhere and have
	// created their streams, which policy follows and consumes.
	nc := natstest.Connect(t, natstest.RunJetStream(t))
	ib, err := bus.New(nc, bus.Options{Namespace: "alpd", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{streams.Identity, streams.Send, streams.Inbound, streams.Approvals} {
		st, _ := streams.ByName(name)
		if _, err := ib.EnsureStream(context.Background(), st.Spec([]string{tenant}, streams.Limits{})); err != nil {
			t.Fatal(err)
		}
	}
	b, err := broker.New(broker.Config{Name: "alpd", Tenants: []string{tenant}, Services: []string{"policy"}},
		broker.Deps{NATS: nc, KeyStore: keystore.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if <-b.Started(); b.StartError() != nil {
		t.Fatal(b.StartError())
	}
	testkit.Eventually(t, 10*time.Second, b.Ready, "policy alone ready")
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	for _, path := range []string{"/v1/connections", "/v1/blocks", "/v1/admin/policies/sender_org", "/v1/admin/types", "/v1/admin/relationships"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("GET %s: %d, want 503", path, resp.StatusCode)
		}
	}
	a := do(t, http.DefaultClient, mustReq(t, http.MethodGet, srv.URL+"/v1/connections"))
	want(t, "GET /v1/connections", a, http.StatusServiceUnavailable, "web_sessions_unavailable")
	a = do(t, http.DefaultClient, mustReq(t, http.MethodGet, srv.URL+"/v1/rules"))
	if a.Status != http.StatusUnauthorized && a.Status != http.StatusServiceUnavailable || !strings.Contains(a.Header.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("GET /v1/rules with no token: %s %v; want the bearer challenge", a, a.Header)
	}
}

func mustReq(t *testing.T, method, u string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// notice finds the connection.accept/v1 person's broker stored for them to
// the asker, answering request.
func notice(s *site, person, asker, request string) error {
	subj, err := streams.DecidedSubject(tenant, person, "x")
	if err != nil {
		return err
	}
	filter := strings.TrimSuffix(subj, "x") + ">"
	st, err := s.b.Bus().JetStream().Stream(context.Background(), s.b.Bus().StreamName(streams.Decided))
	if err != nil {
		return err
	}
	info, err := st.Info(context.Background(), jetstream.WithSubjectFilter(filter))
	if err != nil {
		return err
	}
	for subject := range info.State.Subjects {
		m, err := st.GetLastMsgForSubject(context.Background(), subject)
		if err != nil {
			return err
		}
		ev, err := bus.Decode(m.Data)
		if err != nil {
			return err
		}
		env := ev.GetDecided().GetEnvelope()
		if env.GetType() == "connection.accept/v1" && env.GetTo() == asker && env.GetInReplyTo() == request {
			return nil
		}
	}
	return fmt.Errorf("no notice to %s among %d decisions of %s", asker, len(info.State.Subjects), person)
}
