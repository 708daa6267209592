package nlipapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/broker"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

const (
	tenant    = "example.org"
	publicURL = "https://broker.example"
)

// rig is a running broker with one person (ana) whose agent holds a token.
type rig struct {
	br     *brokertest.Rig
	b      *broker.Broker
	js     jetstream.JetStream
	srv    *httptest.Server
	person identitystore.Person
	agent  brokertest.Agent
	// token is a consumer agent's token with alp.send and alp.read.
	token string
}

type rigOptions struct {
	services []string
	nlip     nlipapi.Config
	// door tunes the send path all doors share (rates, decision wait).
	door ingress.DoorConfig
	// log receives the broker's log (nil: discarded).
	log *slog.Logger
	// streamsOf are services that do not run here whose streams exist
	// (policy's, for ingress's message types).
	streamsOf []alpv1.Role
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	br := brokertest.StartWithStreamsOf(t, broker.Config{Tenants: []string{tenant}, PublicURL: publicURL, Services: o.services, NLIP: o.nlip, Door: o.door}, o.log, o.streamsOf...)
	js, err := jetstream.New(br.NC)
	if err != nil {
		t.Fatal(err)
	}
	a := br.Agent(t, tenant, "sub-ana", "ana@example.org", "agent-1", "alp.send", "alp.read")
	return &rig{br: br, b: br.B, js: js, srv: br.Srv, person: a.Person, agent: a, token: a.Token}
}

// mint is a token for another agent of ana's.
func (r *rig) mint(t testing.TB, agent, class string, scopes ...string) string {
	t.Helper()
	a := r.agent
	a.AgentID = agent
	return r.br.Mint(t, a, class, scopes...)
}

// post sends body to path with the bearer token (if any) and returns the
// status, headers and decoded NLIP reply.
func (r *rig) post(t testing.TB, path, token, contentType string, body []byte, header ...string) (*http.Response, *nlip.Message) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return r.do(t, req)
}

func (r *rig) do(t testing.TB, req *http.Request) (*http.Response, *nlip.Message) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m *nlip.Message
	switch resp.Header.Get("Content-Type") {
	case "application/cbor":
		m, err = nlip.DecodeCBOR(data, nlip.Limits{})
	default:
		m, err = nlip.DecodeJSON(data, nlip.Limits{})
	}
	if err != nil {
		t.Fatalf("%s %s answered %d with a body that is not NLIP: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, data)
	}
	return resp, m
}

// meetingBody is a valid meeting.request/v1 body.
const meetingBody = `{"subject":"Planning","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["bo@other.example"]}`

// sendJSON is an ALP send as an agent writes it.
func sendJSON(to string, extra ...string) []byte {
	subs := []string{
		`{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:` + to + `"}`,
		`{"label":"alp.body","format":"structured","subformat":"json","content":` + meetingBody + `}`,
	}
	subs = append(subs, extra...)
	return []byte(`{"messagetype":"alp:meeting.request/v1","format":"text","subformat":"english",` +
		`"content":"Please ask Bo for a meeting","submessages":[` + strings.Join(subs, ",") + `]}`)
}

// result is the reply's alp.result.
func result(t testing.TB, m *nlip.Message) map[string]any {
	t.Helper()
	sm, ok := m.FindLabel("alp.result")
	if !ok {
		t.Fatalf("reply has no alp.result: %+v", m)
	}
	raw, ok := sm.Content.JSON()
	if !ok {
		t.Fatalf("alp.result is not JSON: %+v", sm)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// apiError is the reply's alp.error.
func apiError(t testing.TB, m *nlip.Message) map[string]any {
	t.Helper()
	if m.MessageType != "error" {
		t.Errorf("error reply has messagetype %q", m.MessageType)
	}
	sm, ok := m.FindLabel("alp.error")
	if !ok {
		t.Fatalf("error reply has no alp.error: %+v", m)
	}
	raw, _ := sm.Content.JSON()
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// streamBytes returns every message (data and headers) of the broker's
// streams and KV buckets, to check what reached NATS.
func (r *rig) streamBytes(t testing.TB) []byte {
	t.Helper()
	ctx := context.Background()
	var all []byte
	names := r.js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := r.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted (work queues, KV updates)
			}
			all = append(all, m.Data...)
			for k, vs := range m.Header {
				all = append(all, k...)
				for _, v := range vs {
					all = append(all, v...)
				}
			}
		}
	}
	return all
}

// lastSend is the SendRequested of envelope id.
func (r *rig) lastSend(t testing.TB, id string) *alpv1.Event {
	t.Helper()
	s, err := r.js.Stream(context.Background(), "ALPD_SEND")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), "alp.send.example_org."+r.person.ID+"."+id)
	if err != nil {
		t.Fatalf("no SendRequested for %s: %v", id, err)
	}
	ev, err := bus.Decode(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

var ioEOF = io.EOF

func newRequest(t testing.TB, path string, body io.ReadCloser, token string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

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

// ownAPI serves another NLIP API with cfg over the rig's ingress, for tests
// that read its WebSocket stats.
func (r *rig) ownAPI(t testing.TB, cfg nlipapi.Config) (*nlipapi.API, *httptest.Server) {
	t.Helper()
	cfg.PublicURL = publicURL
	api := nlipapi.New(r.b.Ingress(), cfg, nil)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv
}
