package restapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/alpd-project/alpd/broker"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/restapi"
)

const (
	tenant    = "example.org"
	partner   = "partner.example"
	publicURL = "https://broker.example"
)

// rig is a whole broker (brokertest) with people of two organizations:
// ana and bo at example.org, cy at partner.example. Every request the
// tests make through it is checked against the served OpenAPI document.
type rig struct {
	br  *brokertest.Rig
	js  jetstream.JetStream
	ana brokertest.Agent
	bo  brokertest.Agent
	cy  brokertest.Agent
	// anaPAT is a personal access token of ana's with alp.read and
	// alp.send, issued the way identity issues one.
	anaPAT string
	check  *checker
}

func newRig(t testing.TB, rest restapi.Config) *rig {
	t.Helper()
	return newRigWith(t, broker.Config{REST: rest})
}

// newRigWith is the rig on a broker of cfg (its tenants and URL set here).
func newRigWith(t testing.TB, cfg broker.Config) *rig {
	t.Helper()
	if cfg.Door.PerAgent == (ingress.Rate{}) {
		// Tests poll: only the rate test runs into the limits.
		cfg.Door.PerAgent, cfg.Door.PerPerson = ingressRate(1000, 1000), ingressRate(1000, 1000)
	}
	cfg.Tenants, cfg.PublicURL = []string{tenant, partner}, publicURL
	br := brokertest.Start(t, cfg)
	js, err := jetstream.New(br.NC)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{br: br, js: js,
		ana: br.Agent(t, tenant, "sub-ana", "ana@example.org", "agent-ana", "alp.send", "alp.read"),
		bo:  br.Agent(t, tenant, "sub-bo", "bo@example.org", "agent-bo", "alp.send", "alp.read"),
		cy:  br.Agent(t, partner, "sub-cy", "cy@partner.example", "agent-cy", "alp.send", "alp.read"),
	}
	r.anaPAT = r.pat(t, r.ana, "alp.read", "alp.send")
	r.check = newChecker(t, r.served(t))
	return r
}

// pat issues a personal access token of a's person with scopes, as
// identity's /v1/pats does (accesstoken.NewPAT, the hash stored), and
// waits until ingress accepts it.
func (r *rig) pat(t testing.TB, a brokertest.Agent, scopes ...string) string {
	t.Helper()
	token, id, hashHex := accesstoken.NewPAT()
	hash, err := identitystore.ParseHash(hashHex)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.br.B.Identity().Store().IssuePAT(context.Background(), identitystore.PATSpec{
		Tenant: a.Person.Tenant, ID: id, PersonID: a.Person.ID, Name: "muse", TokenSHA256: hash,
		Scopes: scopes, Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := r.br.B.Ingress().Authenticator().Authenticate(context.Background(), "Bearer "+token)
		return err
	}, "ingress accepts the PAT")
	return token
}

// served is the OpenAPI document as the broker serves it.
func (r *rig) served(t testing.TB) []byte {
	t.Helper()
	resp, err := http.Get(r.br.Srv.URL + restapi.PathOpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", restapi.PathOpenAPI, resp.StatusCode, err)
	}
	return data
}

// answer is a response, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t testing.TB) map[string]any {
	t.Helper()
	var out map[string]any
	if err := json.Unmarshal(a.body, &out); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v\n%s", a.status, err, a.body)
	}
	return out
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }

// code is the problem's code ("" for an answer that is not a problem).
func (a answer) code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(a.body, &p)
	return p.Code
}

// do sends a request with token (none: "") and optional header pairs,
// through the checker.
func (r *rig) do(t testing.TB, method, path, token string, body any, header ...string) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, r.br.Srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Transport: r.check}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// sendCount is the number of SendRequested events stored.
func (r *rig) sendCount(t testing.TB) uint64 {
	t.Helper()
	s, err := r.js.Stream(context.Background(), "ALPD_SEND")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// checker is an http.RoundTripper that checks every exchange against the
// OpenAPI document with libopenapi-validator: every response (status,
// headers, body) must be one the document describes for its operation,
// and a request the broker took (2xx) must be one the document allows.
// Paths outside the document (404 and 405 fallbacks) must answer the
// Problem schema.
type checker struct {
	t         testing.TB
	v         validator.Validator
	mu        sync.Mutex
	exchanges int
	// operations counts the exchanges per documented operation, for the
	// coverage check.
	operations map[string]int
}

func newChecker(t testing.TB, doc []byte) *checker {
	t.Helper()
	d, err := libopenapi.NewDocument(doc)
	if err != nil {
		t.Fatalf("the served document does not load: %v", err)
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		t.Fatalf("the served document makes no validator: %v", errs)
	}
	return &checker{t: t, v: v, operations: map[string]int{}}
}

func (c *checker) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	if req.Header.Get("X-Undocumented") != "" {
		// A convenience the document cannot express (a type name's
		// slashes unescaped): not checked.
		return http.DefaultTransport.RoundTrip(req)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))

	// The validator reads the bodies it checks: give it copies.
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	vresp := *resp
	vresp.Body = io.NopCloser(bytes.NewReader(respBody))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exchanges++
	what := req.Method + " " + req.URL.RequestURI() + " → " + resp.Status
	if _, errs := c.v.ValidateHttpResponse(vreq, &vresp); len(errs) > 0 {
		if !pathMissing(errs) {
			c.t.Errorf("the answer to %s is not what the document says:\n%s\n%s", what, errList(errs), respBody)
		} else if !isProblem(resp, respBody) {
			c.t.Errorf("%s is outside the document and its answer is no problem: %s", what, respBody)
		}
	} else {
		c.operations[req.Method+" "+resp.Request.URL.Path]++
	}
	if resp.StatusCode < 300 {
		vreq := req.Clone(req.Context())
		vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
		if _, errs := c.v.ValidateHttpRequest(vreq); len(errs) > 0 {
			c.t.Errorf("the broker took %s, which the document refuses:\n%s", what, errList(errs))
		}
	}
	return resp, nil
}

func pathMissing(errs []*verrors.ValidationError) bool {
	for _, e := range errs {
		if !e.IsPathMissingError() && !e.IsOperationMissingError() {
			return false
		}
	}
	return true
}

func errList(errs []*verrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  - %s\n", e.Error())
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "      %s at %s\n", s.Reason, s.FieldPath)
		}
	}
	return b.String()
}

// isProblem reports whether an answer is RFC 9457 problem details with a
// code.
func isProblem(resp *http.Response, body []byte) bool {
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	return resp.Header.Get("Content-Type") == "application/problem+json" &&
		json.Unmarshal(body, &p) == nil && p.Status == resp.StatusCode && p.Code != ""
}

// meetingBody is a valid meeting.request/v1 body.
var meetingBody = map[string]any{"subject": "Planning", "start": "2026-12-03T10:00:00Z", "duration": "PT30M",
	"attendees": []string{"bo@example.org"}}

func send(to string) map[string]any {
	return map[string]any{"to": to, "type": "meeting.request/v1", "body": meetingBody}
}

func ingressRate(limit float64, burst int) ingress.Rate {
	return ingress.Rate{Limit: limit, Burst: burst}
}

// eventually polls ok until it holds (10s).
func (r *rig) eventually(t testing.TB, ok func() bool, what string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		if !ok() {
			return fmt.Errorf("not yet: %s", what)
		}
		return nil
	}, what)
}

// registerType registers an organization's message type on policy's
// stream, as its admin's PUT /v1/admin/types does, and waits until
// ingress knows it.
func (r *rig) registerType(t testing.TB, tenant, name string, schema []byte) {
	t.Helper()
	ctx := context.Background()
	st, err := typestore.Open(ctx, r.br.B.Bus(), []string{tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Register(ctx, tenant, name, schema, &alpv1.Actor{Kind: alpv1.ActorKind_ACTOR_KIND_PERSON, Id: "admin"}); err != nil {
		t.Fatal(err)
	}
	r.eventually(t, func() bool {
		ts, err := r.br.B.Ingress().Types(ingress.Sender{Tenant: tenant})
		return err == nil && slices.ContainsFunc(ts, func(t *msgtypes.Type) bool { return t.Name() == name })
	}, "ingress knows "+name)
}
