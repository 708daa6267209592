package e2e

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/tlog"

	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

// What TestMessagePath sends: Ana's agent asks to send a note to Bo, with
// an NMP header declaring one step of its own that spent agentTokens.
const (
	pathUser        = "ana"
	pathTo          = "bo@other.example"
	pathType        = "note/v1"
	pathBody        = `{"text":"hello Bo"}`
	pathAgentTokens = 42
	// pathBroker is the broker name, which namespaces its streams.
	pathBroker = "alpd"
)

// TestMessagePath follows one ALP message along docs/message-path.md, hop
// by hop, against the real alpd binary (all-in-one): Ana's agent sends it
// over NLIP with a personal access token; the answer is policy's decision
// (refused by default-deny); the events the hops stored carry the envelope's
// hop trace in order (ingress accept, then the agent's declared step, then
// policy decide); and Ana's ledger holds the envelope.send_requested entry
// the ledger wrote from the same SendRequested, committing to exactly this
// envelope, then the policy.decided entry of the Decided, under a
// checkpoint the broker signed, with a proof of inclusion. The trace has no API, so the test reads it where the services
// left it: the events on the embedded NATS, which alpd opens on a loopback
// port for it (nats.listen).
func TestMessagePath(t *testing.T) {
	b := binaries(t)
	addrs := freeAddrs(t, 2)
	addr, natsAddr := addrs[0], addrs[1]
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"broker": map[string]any{"name": pathBroker, "tenants": []map[string]string{{"domain": splitTenant}}},
		"nats":   map[string]any{"listen": natsAddr},
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": pathUser, "password": pathUser + "-pw"}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv(), "--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)
	pat, person := signInAgent(t, addr, pathUser, "alp.send", "alp.read")

	// 1. The NLIP door → ingress → policy → back to the agent.
	res := sendOnPath(t, addr, pat)
	// Bo is at another broker and has never connected with Ana: to a
	// stranger, only a connection request may go.
	if res.Outcome != "refuse" || len(res.Reasons) != 1 || res.Reasons[0].Party != "broker" || !strings.Contains(res.Reasons[0].Message, "stranger") {
		t.Fatalf("decision answered to the agent: %+v; want refuse by the broker's stranger rule", res)
	}
	if res.Type != pathType || res.To != pathTo || res.EnvelopeID == "" {
		t.Fatalf("answer names envelope %q (%s to %s); want the one sent (%s to %s)", res.EnvelopeID, res.Type, res.To, pathType, pathTo)
	}
	id := res.EnvelopeID

	// 2. What the hops stored: SendRequested on the send stream (ingress),
	// Decided on the decided stream (policy), each with the trace so far.
	js := natsOf(t, natsAddr)
	sent := storedEvent(t, js, streams.Send, func() (string, error) { return streams.SendSubject(splitTenant, person, id) })
	sr := sent.GetSendRequested()
	if sr == nil || sr.GetEnvelope().GetId() != id || sr.GetSenderPersonId() != person {
		t.Fatalf("send stream holds %v for envelope %s; want Ana's SendRequested", sent, id)
	}
	env := sr.GetEnvelope()
	if env.GetFrom() != pathUser+"@"+splitTenant || env.GetTo() != pathTo || env.GetType() != pathType || len(env.GetBody()) != 0 || env.GetSealedBody() == nil {
		t.Fatalf("stored envelope: from %q to %q type %q, body %d bytes in the clear, sealed %t; want Ana's, sealed",
			env.GetFrom(), env.GetTo(), env.GetType(), len(env.GetBody()), env.GetSealedBody() != nil)
	}
	wantIngress := []hopWant{
		{service: "ingress", action: "accept", trust: nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, reason: "personal_access_token"},
		{service: "agent", trust: nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, tokens: pathAgentTokens},
	}
	checkHops(t, "SendRequested", envelope.NMP(env), wantIngress)

	decided := storedEvent(t, js, streams.Decided, func() (string, error) { return streams.DecidedSubject(splitTenant, person, id) })
	d := decided.GetDecided()
	if d == nil || d.GetEnvelope().GetId() != id || d.GetOutcome() != alpv1.Outcome_OUTCOME_REFUSE ||
		len(d.GetReasons()) != 1 || d.GetReasons()[0].GetCode() != "stranger" {
		t.Fatalf("decided stream holds %v for envelope %s; want policy's refusal of a stranger", decided, id)
	}
	if d.GetEnvelope().GetSealedBody() != nil || len(d.GetEnvelope().GetBody()) != 0 {
		t.Errorf("a refused envelope leaves the sender side with a body")
	}
	if got, want := decided.GetHeader().GetCausationId(), sent.GetHeader().GetEventId(); got != want {
		t.Errorf("Decided is caused by %q; want the SendRequested %q", got, want)
	}
	checkHops(t, "Decided", envelope.NMP(d.GetEnvelope()),
		append(wantIngress, hopWant{service: "policy", action: "decide", trust: nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED}))

	// 3. The ledger: Ana's entries for the envelope and its decision, read
	// with her token.
	checkLedgerEntry(t, addr, pat, person, sent, decided)
	p.stop(t)
}

// pathResult is the alp.result of an NLIP answer, decoded on its own.
type pathResult struct {
	EnvelopeID string `json:"envelope_id"`
	Type       string `json:"type"`
	To         string `json:"to"`
	Outcome    string `json:"outcome"`
	Reasons    []struct {
		Party   string `json:"party"`
		Rule    string `json:"rule"`
		Message string `json:"message"`
	} `json:"reasons"`
}

// sendOnPath posts the message to POST /nlip/ with the agent's token and
// returns the alp.result of the answer, which must be a decision (200).
func sendOnPath(t *testing.T, addr, token string) pathResult {
	t.Helper()
	msg := fmt.Sprintf(`{"messagetype":"alp:%s","format":"text","subformat":"english","content":"hello",
	 "submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:%s"},
	 {"label":"alp.body","format":"structured","subformat":"json","content":%s},
	 {"label":"nmp","format":"structured","subformat":"json","content":{"nmp_message":{"trace":[{"agent":"router","action":"drafted the note","tokens":%d}]}}}]}`,
		pathType, pathTo, pathBody, pathAgentTokens)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/nlip/", strings.NewReader(msg))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST /nlip/: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /nlip/: %d %s; want 200 with policy's decision", resp.StatusCode, body)
	}
	c, ok := submessage(body, "alp.result")
	if !ok {
		t.Fatalf("POST /nlip/: no alp.result in %s", body)
	}
	var r pathResult
	if err := json.Unmarshal(c, &r); err != nil {
		t.Fatalf("alp.result: %v in %s", err, c)
	}
	return r
}

// natsOf connects to the broker's embedded NATS on its loopback port.
func natsOf(t *testing.T, addr string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+addr, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to the embedded NATS: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// storedEvent is the event on the subject (built as the services build it)
// of the broker's stream, waiting a little for it: the decision reaches
// the agent from a core subscription, maybe before its publish is acked.
func storedEvent(t *testing.T, js jetstream.JetStream, stream string, subject func() (string, error)) *alpv1.Event {
	t.Helper()
	subj, err := subject()
	if err != nil {
		t.Fatal(err)
	}
	name := bus.StreamName(pathBroker, stream)
	var ev *alpv1.Event
	testkit.Eventually(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			return err
		}
		ev, err = bus.Decode(m.Data)
		return err
	}, name, "on", subj)
	return ev
}

// hopWant is one expected trace entry; an empty action or reason is not
// checked.
type hopWant struct {
	service, action string
	trust           nmpv1.TrustLevel
	reason          string
	tokens          uint64
}

// checkHops requires the NMP header's trace to be exactly want, in order,
// with trust never rising, and the budget to count the agent's tokens.
func checkHops(t *testing.T, where string, h *nmpv1.NmpHeader, want []hopWant) {
	t.Helper()
	var got []string
	for _, e := range h.GetTrace() {
		got = append(got, e.GetService()+"/"+e.GetAction())
	}
	if len(h.GetTrace()) != len(want) {
		t.Fatalf("%s: trace %q; want %d hops %+v", where, got, len(want), want)
	}
	for i, w := range want {
		e := h.GetTrace()[i]
		switch {
		case e.GetService() != w.service || w.action != "" && e.GetAction() != w.action:
			t.Errorf("%s: hop %d is %s/%s; want %s/%s (trace %q)", where, i+1, e.GetService(), e.GetAction(), w.service, w.action, got)
		case e.GetTrust() != w.trust:
			t.Errorf("%s: hop %d (%s) at trust %s; want %s", where, i+1, w.service, e.GetTrust(), w.trust)
		case !strings.Contains(e.GetTrustReason(), w.reason):
			t.Errorf("%s: hop %d (%s) reason %q; want it to name %q", where, i+1, w.service, e.GetTrustReason(), w.reason)
		case e.GetTokens() != w.tokens:
			t.Errorf("%s: hop %d (%s) spent %d tokens; want %d", where, i+1, w.service, e.GetTokens(), w.tokens)
		}
		if i > 0 && e.GetTrust() > h.GetTrace()[i-1].GetTrust() {
			t.Errorf("%s: trust rose at hop %d (%s)", where, i+1, e.GetService())
		}
	}
	if h.GetTrust() != want[len(want)-1].trust || h.GetBudget().GetTokensUsed() != pathAgentTokens {
		t.Errorf("%s: envelope trust %s, tokens used %d; want %s and the agent's %d",
			where, h.GetTrust(), h.GetBudget().GetTokensUsed(), want[len(want)-1].trust, pathAgentTokens)
	}
}

// ledgerGet is GET path on the broker with the agent's token, decoded into
// v when it answers 200; it returns the status and the body.
//
// The ledger answers 503 checkpoint_pending (with Retry-After) for the
// moment between an entry's append and its checkpoint's signature; like any
// well-behaved client, ledgerGet waits that out, for at most 10 seconds.
func ledgerGet(t *testing.T, addr, path, token string, v any) (int, []byte) {
	t.Helper()
	var resp *http.Response
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		var err error
		if resp, err = httpClient.Do(req); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || problemOf(body).Code != "checkpoint_pending" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, body)
		}
	}
	return resp.StatusCode, body
}

// checkpointJSON is the checkpoint every ledger answer carries.
type checkpointJSON struct {
	Note string `json:"note"`
	Size uint64 `json:"size"`
}

// checkLedgerEntry requires Ana's ledger (read with her agent's token) to
// hold two entries: envelope.send_requested of the envelope sent, derived
// from its SendRequested, whose opening commits to exactly that envelope,
// and whose inclusion is proved against a checkpoint signed by the
// tenant's ledger key; then policy.decided, derived from the Decided, with
// its outcome and no commitment.
func checkLedgerEntry(t *testing.T, addr, token, person string, sent, decided *alpv1.Event) {
	t.Helper()
	env := sent.GetSendRequested().GetEnvelope()
	origin := ledgerlog.Origin(splitTenant, person)
	var head struct {
		Origin     string         `json:"origin"`
		Size       uint64         `json:"size"`
		Checkpoint checkpointJSON `json:"checkpoint"`
		PublicKeys []struct {
			VerifierKey string `json:"vkey"`
		} `json:"public_keys"`
	}
	// The writer appends, then a checkpoint round signs: both take a moment.
	testkit.Eventually(t, 20*time.Second, func() error {
		if status, body := ledgerGet(t, addr, "/v1/ledger", token, &head); status != http.StatusOK || head.Checkpoint.Size != 2 {
			return fmt.Errorf("%d %s", status, body)
		}
		return nil
	}, "GET /v1/ledger: two entries under a signed checkpoint")
	if head.Origin != origin || head.Size != 2 {
		t.Fatalf("ledger head: origin %q size %d; want Ana's log %q with two entries", head.Origin, head.Size, origin)
	}
	var vkeys []string
	for _, k := range head.PublicKeys {
		vkeys = append(vkeys, k.VerifierKey)
	}
	verifiers, err := ledgerlog.Verifiers(vkeys...)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := ledgerlog.OpenCheckpoint([]byte(head.Checkpoint.Note), origin, verifiers)
	if err != nil {
		t.Fatalf("the checkpoint does not verify with the tenant's ledger keys: %v", err)
	}

	var page struct {
		Entries []struct {
			Index   uint64 `json:"index"`
			Leaf    string `json:"leaf"`
			Opening *struct {
				Salt   string `json:"salt"`
				Digest string `json:"digest"`
			} `json:"opening"`
		} `json:"entries"`
	}
	if status, body := ledgerGet(t, addr, "/v1/ledger/entries", token, &page); status != http.StatusOK || len(page.Entries) != 2 {
		t.Fatalf("GET /v1/ledger/entries: %d %s; want Ana's two entries", status, body)
	}
	dec, err := ledgerlog.ParseEntry([]byte(page.Entries[1].Leaf))
	if err != nil {
		t.Fatal(err)
	}
	if dec.Index != 1 || dec.Kind != ledgerlog.KindDecided || dec.EnvelopeID != env.GetId() || dec.SourceEvent != decided.GetHeader().GetEventId() ||
		dec.Outcome != ledgerlog.OutcomeRefuse || dec.Commitment != "" || page.Entries[1].Opening != nil || dec.Counterparty != "other.example" {
		t.Fatalf("ledger entry %+v; want %s of envelope %s from event %s, outcome refuse, no commitment",
			dec, ledgerlog.KindDecided, env.GetId(), decided.GetHeader().GetEventId())
	}
	e := page.Entries[0]
	en, err := ledgerlog.ParseEntry([]byte(e.Leaf))
	if err != nil {
		t.Fatal(err)
	}
	if en.Log != origin || en.Index != 0 || en.Kind != ledgerlog.KindSendRequested || en.EnvelopeID != env.GetId() ||
		en.SourceEvent != sent.GetHeader().GetEventId() || en.Counterparty != "other.example" {
		t.Fatalf("ledger entry %+v; want %s of envelope %s from event %s, counterparty other.example",
			en, ledgerlog.KindSendRequested, env.GetId(), sent.GetHeader().GetEventId())
	}

	// The opening reveals the committed digest, which is the digest of the
	// envelope as stored (the body as the agent sent it, canonical).
	if e.Opening == nil {
		t.Fatal("the entry has no opening")
	}
	salt, err := base64.StdEncoding.DecodeString(e.Opening.Salt)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := hex.DecodeString(e.Opening.Digest)
	if err != nil || len(digest) != 32 {
		t.Fatalf("opening digest %q: %v", e.Opening.Digest, err)
	}
	if ledgerlog.Commit(salt, [32]byte(digest)) != en.Commitment {
		t.Fatalf("the opening does not open the entry's commitment %s", en.Commitment)
	}
	canon, err := jcs.Transform([]byte(pathBody))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ledgerlog.EnvelopeDigest(ledgerlog.EnvelopeFields{ID: env.GetId(), From: env.GetFrom(), To: env.GetTo(),
		Type: env.GetType(), Body: canon, Created: env.GetCreated().AsTime()})
	if err != nil {
		t.Fatal(err)
	}
	if [32]byte(digest) != want {
		t.Fatalf("the entry commits to digest %x; the envelope sent has %x", digest, want)
	}

	var proof struct {
		Proof []string `json:"proof"`
	}
	if status, body := ledgerGet(t, addr, "/v1/ledger/proof/inclusion?index=0", token, &proof); status != http.StatusOK {
		t.Fatalf("GET /v1/ledger/proof/inclusion: %d %s", status, body)
	}
	hashes := make([]tlog.Hash, len(proof.Proof))
	for i, s := range proof.Proof {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != tlog.HashSize {
			t.Fatalf("proof hash %q: %v", s, err)
		}
		hashes[i] = tlog.Hash(b)
	}
	if err := tlog.CheckRecord(hashes, int64(cp.Size), cp.Root, 0, tlog.RecordHash([]byte(e.Leaf))); err != nil {
		t.Fatalf("inclusion of the entry in the signed checkpoint: %v", err)
	}
}
