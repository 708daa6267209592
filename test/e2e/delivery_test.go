package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress/mcpapi"
)

// The briefing ana sends lee. briefing.request/v1 has no confidential
// field (it asks for a briefing); briefing.reply/v1 carries the
// confidential ones, `pipeline` and `figures`, so it is the message that
// shows a confidential figure reaching lee's company agents and not his
// consumer agent.
const (
	briefingARR      = "1200000.00"
	briefingPipeline = "450000.00"
	briefing         = `{"as_of":"2026-11-30T10:00:00Z","summary":"Renewal likely.",` +
		`"pipeline":{"currency":"EUR","value":"` + briefingPipeline + `"},` +
		`"figures":[{"label":"ARR","amount":{"currency":"EUR","value":"` + briefingARR + `"}}]}`
	anaLine  = "from ana@example.org, verified by this broker"
	museLine = "from your own agent muse (consumer, self-attested)"
)

// streamMsgs is how many messages the broker's stream holds now.
func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, bus.StreamName(pathBroker, stream))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// ledgerLeaf is one entry of a person's ledger, as its leaf says.
type ledgerLeaf struct {
	Kind       string   `json:"kind"`
	EnvelopeID string   `json:"envelope_id"`
	Agent      string   `json:"agent"`
	TrustClass string   `json:"trust_class"`
	Withheld   []string `json:"withheld"`
	HeldIDs    []string `json:"held_ids"`
	Receipt    *struct {
		EnvelopeID string `json:"envelope_id"`
	} `json:"receipt"`
}

// ledgerLeaves are the entries of the token's person's ledger.
func ledgerLeaves(t *testing.T, addr, token string) ([]ledgerLeaf, error) {
	t.Helper()
	var page struct {
		Entries []struct {
			Leaf string `json:"leaf"`
		} `json:"entries"`
	}
	if status, body := ledgerGet(t, addr, "/v1/ledger/entries?limit=1000", token, &page); status != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/ledger/entries: %d %s", status, body)
	}
	var out []ledgerLeaf
	for _, e := range page.Entries {
		var l ledgerLeaf
		if err := json.Unmarshal([]byte(e.Leaf), &l); err != nil {
			t.Fatalf("leaf %s: %v", e.Leaf, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// TestDeliveryThreeAgents is issue 13's three agents of one person against
// the real alpd: lee's dot (a company agent on the NLIP WebSocket, items
// pushed), lee's Claude (a company agent on MCP, the official Go SDK's
// client) and lee's Muse (a consumer agent on REST with a personal access
// token named muse). Ana, of the same organization, sends lee a briefing
// with confidential figures from her company agent: dot and Claude read
// the figures, Muse reads the briefing without them and a notice that they
// are held for lee; all three under the broker's sender line. Muse then
// writes to lee: dot's item is from "your own agent muse". A request
// naming another sender is refused at the door (REST and NLIP) and stores
// nothing. Lee's ledger records each agent's acknowledgement as a delivery
// (with what Muse's view left out), ana's the receipt of lee's side.
func TestDeliveryThreeAgents(t *testing.T) {
	d := startDeliveryBroker(t, nil)
	addr, lee := d.addr, d.lee
	js := natsOf(t, d.natsAddr)
	// The organization's admin (ana) registers the company clients; each
	// person's agent authorizes as that person.
	dot := companyAgent(t, d.ana, lee, "dot", "alp.read", "alp.send")
	claudeToken := companyAgent(t, d.ana, lee, "claude", "alp.read", "alp.send")
	anaDesk := companyAgent(t, d.ana, d.ana, "desk", "alp.read", "alp.send")
	muse := lee.patNamed(t, "muse", "alp.read", "alp.send")
	lee.OptInFreeText(t)

	dotWS := watchInbox(t, addr, dot)
	claude := connectMCP(t, addr, "claude", claudeToken)

	// Policy makes a company view only once it knows lee has company
	// agents (identity's stream, a moment after the grants): a meeting
	// request first, until its Deliverable holds both views.
	const meeting = `{"subject":"Q4 plan","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@example.org"]}`
	testkit.Eventually(t, 15*time.Second, func() error {
		id := d.waitDelivered(t, anaDesk, "meeting.request/v1", meeting)
		ev := storedEvent(t, js, streams.Deliver, func() (string, error) { return streams.DeliverSubject(splitTenant, lee.personID, id) })
		var classes []string
		for _, v := range ev.GetDeliverable().GetViews() {
			classes = append(classes, v.GetTrustClass())
		}
		if slices.Sort(classes); !slices.Equal(classes, []string{"company", "consumer"}) {
			return fmt.Errorf("views for %v", classes)
		}
		return nil
	}, "policy makes lee's company and consumer views")

	a := sendTyped(t, addr, anaDesk, "lee@"+splitTenant, "briefing.reply/v1", briefing)
	if a.Outcome != "deliver" && a.Outcome != "deliver_partial" {
		t.Fatalf("ana's briefing: %+v", a)
	}
	id := a.EnvelopeID
	checkFromAna := func(who string, it agentItem) {
		t.Helper()
		if it.Line != anaLine || it.Sender.Text != anaLine || it.Sender.Address != "ana@"+splitTenant || it.Sender.OwnAgent ||
			it.Sender.Agent != "desk" || it.Sender.TrustClass != "company" || it.Sender.Attestation != "attested" {
			t.Errorf("%s: sender line %q, sender %+v; want %q from ana's company agent desk", who, it.Line, it.Sender, anaLine)
		}
	}
	figures := func(it agentItem) (pipeline, arr any) {
		p, _ := it.Body["pipeline"].(map[string]any)
		if fs, _ := it.Body["figures"].([]any); len(fs) == 1 {
			f, _ := fs[0].(map[string]any)
			amount, _ := f["amount"].(map[string]any)
			arr = amount["value"]
		}
		return p["value"], arr
	}

	// dot: pushed on its WebSocket, every field.
	pushed := dotWS.until(t, id, 15*time.Second)
	checkFromAna("dot", pushed)
	if p, arr := figures(pushed); p != briefingPipeline || arr != briefingARR || pushed.Type != "briefing.reply/v1" {
		t.Errorf("dot's item: pipeline %v ARR %v (%s); want the figures: %v", p, arr, pushed.Type, pushed.Body)
	}
	if err := dotWS.ack(context.Background(), id); err != nil {
		t.Fatal(err)
	}

	// Claude: told on its session's stream, reads the item with the tool.
	select {
	case <-claude.news:
	case <-time.After(15 * time.Second):
		t.Fatal("no notifications/resources/updated for alp://inbox on Claude's session")
	}
	var page struct {
		Items []agentItem `json:"items"`
	}
	claude.mustCall(t, "check_inbox", map[string]any{"limit": 100}, &page)
	if !slices.ContainsFunc(page.Items, func(it agentItem) bool { return it.ID == id }) {
		t.Fatalf("Claude's check_inbox lacks the briefing %s: %+v", id, page.Items)
	}
	var read agentItem
	claude.mustCall(t, "read_item", map[string]any{"id": id}, &read)
	checkFromAna("claude", agentItem{Line: read.Sender.Text, Sender: read.Sender})
	if p, arr := figures(read); p != briefingPipeline || arr != briefingARR {
		t.Errorf("Claude's item: pipeline %v ARR %v; want the figures: %v", p, arr, read.Body)
	}
	var acked struct {
		Acked int `json:"acked"`
	}
	claude.mustCall(t, "ack", map[string]any{"ids": []string{id}}, &acked)
	if acked.Acked != 1 {
		t.Errorf("Claude's ack: %d", acked.Acked)
	}

	// Muse (consumer, REST): the briefing without the figures, and the
	// notice that they wait for lee.
	it := restItem(t, addr, muse, id)
	checkFromAna("muse", it)
	if _, ok := it.Body["pipeline"]; ok || it.Body["figures"] != nil || it.Body["as_of"] == nil {
		t.Errorf("Muse's body: %v; want as_of and no confidential field", it.Body)
	}
	if strings.Contains(it.Text, briefingARR) || strings.Contains(it.Text, briefingPipeline) {
		t.Errorf("a figure in Muse's text: %s", it.Text)
	}
	if v := it.verdict("/pipeline/value"); v != "not_for_this_agent" {
		t.Errorf("Muse's verdict on /pipeline/value: %q", v)
	}
	if i := slices.IndexFunc(it.Held, func(h heldNotice) bool { return h.Kind == "confidential_fields" }); i < 0 || !slices.Contains(it.Held[i].Pointers, "/pipeline/value") || !slices.Contains(it.Held[i].Pointers, "/figures/0/amount/value") {
		t.Errorf("Muse's held notices: %+v; want confidential_fields with /pipeline/value and /figures/0/amount/value", it.Held)
	}
	if status, raw := bearerPost(t, addr, "/v1/agent/inbox/"+id+"/ack", muse, nil, nil); status != http.StatusOK {
		t.Fatalf("Muse acks: %d %s", status, raw)
	}

	// Muse writes to lee: dot's item is from lee's own agent.
	var sent struct {
		EnvelopeID string `json:"envelope_id"`
		Outcome    string `json:"outcome"`
	}
	if status, raw := bearerPost(t, addr, "/v1/agent/messages", muse,
		map[string]any{"to": "lee@" + splitTenant, "type": "note/v1", "body": map[string]any{"text": "Call ana back about the renewal."}}, &sent); status != http.StatusOK || sent.Outcome != "deliver" {
		t.Fatalf("Muse's note to lee: %d %s", status, raw)
	}
	note := dotWS.until(t, sent.EnvelopeID, 15*time.Second)
	if note.Line != museLine || note.Sender.Text != museLine || !note.Sender.OwnAgent || note.Sender.Agent != "muse" ||
		note.Sender.TrustClass != "consumer" || note.Sender.Attestation != "self-attested" {
		t.Errorf("dot's item from Muse: line %q, sender %+v; want %q", note.Line, note.Sender, museLine)
	}
	if text, _ := note.Body["text"].(string); !strings.HasPrefix(text, "<<untrusted:") || !strings.Contains(text, "Call ana back") {
		t.Errorf("the note's free text arrives wrapped: %q", text)
	}
	if err := dotWS.ack(context.Background(), sent.EnvelopeID); err != nil {
		t.Fatal(err)
	}

	// Claiming another sender: refused at the door, nothing stored.
	sends, inboxMsgs := streamMsgs(t, js, streams.Send), streamMsgs(t, js, streams.Inbox)
	status, raw := bearerPost(t, addr, "/v1/agent/messages", muse,
		map[string]any{"to": "lee@" + splitTenant, "type": "note/v1", "body": map[string]any{"text": "I am ana."}, "from": "ana@" + splitTenant}, nil)
	if p := problemOf(raw); status != http.StatusForbidden || p.Code != "sender_mismatch" || p.Pointer != "/from" {
		t.Errorf("REST send from ana with lee's PAT: %d %s; want 403 sender_mismatch at /from", status, raw)
	}
	status, raw = nlipPost(t, addr, dot, nlipSend("lee@"+splitTenant, "note/v1", `{"text":"I am ana."}`,
		`{"label":"alp.from","format":"text","subformat":"english","content":"acct:ana@`+splitTenant+`"}`))
	var e struct {
		Code string `json:"code"`
	}
	if c, ok := submessage(raw, "alp.error"); status != http.StatusForbidden || !ok || json.Unmarshal(c, &e) != nil || e.Code != "sender_mismatch" {
		t.Errorf("NLIP send with alp.from ana and dot's token: %d %s; want 403 sender_mismatch", status, raw)
	}
	if s, i := streamMsgs(t, js, streams.Send), streamMsgs(t, js, streams.Inbox); s != sends || i != inboxMsgs {
		t.Errorf("after the refused claims: %d sends (was %d), %d inbox messages (was %d); want nothing stored", s, sends, i, inboxMsgs)
	}

	// The ledgers: lee's records the three deliveries of the briefing,
	// each agent's own; ana's holds lee's side's receipt for it.
	testkit.Eventually(t, 20*time.Second, func() error {
		var classes []string
		agents := map[string]bool{}
		leaves, err := ledgerLeaves(t, addr, muse)
		if err != nil {
			return err
		}
		for _, l := range leaves {
			if l.Kind != "inbox.delivered" || l.EnvelopeID != id {
				continue
			}
			classes = append(classes, l.TrustClass)
			agents[l.Agent] = true
			if l.TrustClass == "consumer" && (!slices.Contains(l.Withheld, "/pipeline/value") || len(l.HeldIDs) == 0) {
				return fmt.Errorf("Muse's delivery: %+v; want /pipeline/value withheld and the held notice", l)
			}
			if l.TrustClass == "company" && len(l.Withheld) != 0 {
				return fmt.Errorf("a company agent's delivery left out %v", l.Withheld)
			}
		}
		if slices.Sort(classes); !slices.Equal(classes, []string{"company", "company", "consumer"}) || len(agents) != 3 {
			return fmt.Errorf("lee's inbox.delivered entries for %s: classes %v, %d agents", id, classes, len(agents))
		}
		return nil
	}, "lee's ledger records the three deliveries")
	testkit.Eventually(t, 20*time.Second, func() error {
		leaves, err := ledgerLeaves(t, addr, anaDesk)
		if err != nil {
			return err
		}
		for _, l := range leaves {
			if l.Kind == "receipt.received" && (l.EnvelopeID == id || l.Receipt != nil && l.Receipt.EnvelopeID == id) {
				return nil
			}
		}
		return fmt.Errorf("no receipt.received for %s in ana's ledger", id)
	}, "ana's ledger holds lee's receipt")

	// Claude ends its session, as a client does: alpd's shutdown waits
	// for open MCP session streams.
	_ = claude.s.Close()
	d.stop(t)
}

// mcpInitialize posts an MCP initialize request to /mcp with token and
// returns the answer's status, WWW-Authenticate and body.
func mcpInitialize(t *testing.T, addr, token string) (int, string, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+mcpapi.Path, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), raw
}

// TestDeliveryBadInput is the e2e slice of issue 13's bad input, against
// the real alpd: an MCP request with an access token another broker issued
// (for its own audience) is 401; a personal access token without alp.read
// reading the inbox is 403 insufficient_scope; acknowledging another
// person's item is 404, the same answer as an item that does not exist, on
// REST, NLIP and MCP, and an acknowledgement naming one such id
// acknowledges none; a cursor the inbox did not make (another list's
// included) is 400 invalid_cursor and a page over 100 is 400
// invalid_limit on every door; an unknown type or a body failing its
// schema is 422 with the pointer. Each leaves everything as it was: no
// send, no acknowledgement stored, lee's inbox unchanged.
func TestDeliveryBadInput(t *testing.T) {
	d := startDeliveryBroker(t, nil)
	addr, lee := d.addr, d.lee
	js := natsOf(t, d.natsAddr)
	muse := lee.patNamed(t, "muse", "alp.read", "alp.send")
	sendOnly := lee.patNamed(t, "sender", "alp.send")
	id := d.waitDelivered(t, d.anaPAT, "meeting.request/v1",
		`{"subject":"Q4 plan","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@example.org"]}`)
	restItem(t, addr, muse, id)
	anaMCP := connectMCP(t, addr, "ana-mcp", d.anaPAT)
	t.Cleanup(func() { _ = anaMCP.s.Close() })

	// A token of another broker: a second alpd hosting the same domain,
	// whose authorization server issues ana a company token for itself.
	other := startDeliveryBroker(t, nil)
	foreign := companyAgent(t, other.ana, other.ana, "desk", "alp.read", "alp.send")
	if c := jwtClaims(t, foreign); containsAud(c["aud"], "http://"+addr) || c["aud"] == "http://"+addr {
		t.Fatalf("the other broker's token is for this broker: %v", c["aud"])
	}

	before := restAll(t, addr, muse)
	sends, inboxMsgs := streamMsgs(t, js, streams.Send), streamMsgs(t, js, streams.Inbox)

	// MCP with a token for another audience.
	status, challenge, raw := mcpInitialize(t, addr, foreign)
	if p := problemOf(raw); status != http.StatusUnauthorized || p.Code != "invalid_token" ||
		!strings.Contains(challenge, `resource_metadata="http://`+addr+`/.well-known/oauth-protected-resource"`) {
		t.Errorf("MCP with another broker's token: %d %q %s; want 401 invalid_token with resource_metadata", status, challenge, raw)
	}
	if status, _, raw := mcpInitialize(t, other.addr, foreign); status != http.StatusOK {
		t.Errorf("the token at its own broker: %d %s", status, raw)
	}

	// Without alp.read.
	for _, path := range []string{"/v1/agent/inbox", "/v1/agent/inbox/" + id, "/nlip/inbox"} {
		status, raw := bearerGet(t, addr, path, sendOnly, nil)
		code := problemOf(raw).Code
		if c, ok := submessage(raw, "alp.error"); ok {
			var e problem
			_ = json.Unmarshal(c, &e)
			code = e.Code
		}
		if status != http.StatusForbidden || code != "insufficient_scope" {
			t.Errorf("GET %s with a PAT without alp.read: %d %s; want 403 insufficient_scope", path, status, raw)
		}
	}

	// Another person's item, like one that does not exist.
	const absent = "0190a5b8-7a7e-7c3e-9a8c-2d1f3b4c5d6e"
	notFound := func(door string, status int, raw []byte, ids ...string) string {
		t.Helper()
		p := problemOf(raw)
		if c, ok := submessage(raw, "alp.error"); ok {
			_ = json.Unmarshal(c, &p)
		}
		if status != http.StatusNotFound || p.Code != "not_found" {
			t.Errorf("%s acking %v: %d %s; want 404 not_found", door, ids, status, raw)
		}
		return strings.ReplaceAll(string(raw), ids[0], "<id>")
	}
	s1, r1 := bearerPost(t, addr, "/v1/agent/inbox/"+id+"/ack", d.anaPAT, nil, nil)
	s2, r2 := bearerPost(t, addr, "/v1/agent/inbox/"+absent+"/ack", d.anaPAT, nil, nil)
	if a, b := notFound("REST", s1, r1, id), notFound("REST", s2, r2, absent); a != b {
		t.Errorf("REST: lee's item %s and no item answer differently:\n%s\n%s", id, a, b)
	}
	s1, r1 = bearerPost(t, addr, "/v1/agent/inbox/ack", d.anaPAT, map[string]any{"ids": []string{id}}, nil)
	s2, r2 = bearerPost(t, addr, "/v1/agent/inbox/ack", d.anaPAT, map[string]any{"ids": []string{absent}}, nil)
	if a, b := notFound("REST batch", s1, r1, id), notFound("REST batch", s2, r2, absent); a != b {
		t.Errorf("REST batch: lee's item and no item answer differently:\n%s\n%s", a, b)
	}
	s1, r1 = nlipPost(t, addr, d.anaPAT, nlipAck(id))
	s2, r2 = nlipPost(t, addr, d.anaPAT, nlipAck(absent))
	if a, b := notFound("NLIP", s1, r1, id), notFound("NLIP", s2, r2, absent); a != b {
		t.Errorf("NLIP: lee's item and no item answer differently:\n%s\n%s", a, b)
	}
	var mcpAnswers []string
	for _, x := range []string{id, absent} {
		err := anaMCP.call(context.Background(), "ack", map[string]any{"ids": []string{x}}, nil)
		te, ok := err.(*toolError)
		if !ok || te.code() != "not_found" {
			t.Errorf("MCP ack of %s by ana: %v; want the tool error not_found", x, err)
			continue
		}
		mcpAnswers = append(mcpAnswers, strings.ReplaceAll(te.text, x, "<id>"))
	}
	if len(mcpAnswers) == 2 && mcpAnswers[0] != mcpAnswers[1] {
		t.Errorf("MCP: lee's item and no item answer differently:\n%s\n%s", mcpAnswers[0], mcpAnswers[1])
	}
	// All or nothing: lee's own item beside one that does not exist.
	status, raw = bearerPost(t, addr, "/v1/agent/inbox/ack", muse, map[string]any{"ids": []string{id, absent}}, nil)
	if status != http.StatusNotFound || problemOf(raw).Code != "not_found" {
		t.Errorf("Muse acks its item and an absent one: %d %s; want 404 and nothing acknowledged", status, raw)
	}

	// Cursors and pages.
	var types struct {
		Next string `json:"next"`
	}
	if status, raw := bearerGet(t, addr, "/v1/agent/types?limit=1", muse, &types); status != http.StatusOK || types.Next == "" {
		t.Fatalf("a page of types: %d %s", status, raw)
	}
	for _, c := range []struct{ path, code string }{
		{"/v1/agent/inbox?after=bm90LWEtY3Vyc29y", "invalid_cursor"},
		{"/v1/agent/inbox?after=" + url.QueryEscape(types.Next), "invalid_cursor"},
		{"/v1/agent/inbox?limit=101", "invalid_limit"},
		{"/v1/agent/inbox?limit=0", "invalid_limit"},
		{"/nlip/inbox?after=bm90LWEtY3Vyc29y", "invalid_cursor"},
		{"/nlip/inbox?limit=101", "invalid_limit"},
	} {
		status, raw := bearerGet(t, addr, c.path, muse, nil)
		code := problemOf(raw).Code
		if sm, ok := submessage(raw, "alp.error"); ok {
			var e problem
			_ = json.Unmarshal(sm, &e)
			code = e.Code
		}
		if status != http.StatusBadRequest || code != c.code {
			t.Errorf("GET %s: %d %s; want 400 %s", c.path, status, raw, c.code)
		}
	}
	for _, c := range []struct {
		args map[string]any
		code string
	}{{map[string]any{"after": "bm90LWEtY3Vyc29y"}, "invalid_cursor"}, {map[string]any{"limit": 101}, "invalid_limit"}} {
		err := anaMCP.call(context.Background(), "check_inbox", c.args, nil)
		if te, ok := err.(*toolError); !ok || te.code() != c.code {
			t.Errorf("MCP check_inbox %v: %v; want the tool error %s", c.args, err, c.code)
		}
	}

	// Types and bodies.
	status, raw = bearerPost(t, addr, "/v1/agent/messages", muse, map[string]any{"to": "ana@" + splitTenant, "type": "nope/v1", "body": map[string]any{}}, nil)
	if p := problemOf(raw); status != http.StatusUnprocessableEntity || p.Code != "unknown_message_type" || p.Pointer != "/type" {
		t.Errorf("an unknown type: %d %s; want 422 unknown_message_type at /type", status, raw)
	}
	status, raw = bearerPost(t, addr, "/v1/agent/messages", muse, map[string]any{"to": "ana@" + splitTenant, "type": "meeting.request/v1",
		"body": map[string]any{"subject": "Q4", "start": "2026-12-03 10:00", "attendees": []string{"ana@example.org"}}}, nil)
	var invalid struct {
		Code     string `json:"code"`
		Problems []struct {
			Pointer, Keyword string
		} `json:"problems"`
	}
	_ = json.Unmarshal(raw, &invalid)
	if status != http.StatusUnprocessableEntity || invalid.Code != "invalid_body" ||
		!slices.ContainsFunc(invalid.Problems, func(p struct{ Pointer, Keyword string }) bool { return p.Pointer == "/start" && p.Keyword == "format" }) ||
		!slices.ContainsFunc(invalid.Problems, func(p struct{ Pointer, Keyword string }) bool { return p.Keyword == "required" }) {
		t.Errorf("a body failing its schema: %d %s; want 422 invalid_body naming /start (format) and the missing duration", status, raw)
	}

	// Nothing changed.
	if s, i := streamMsgs(t, js, streams.Send), streamMsgs(t, js, streams.Inbox); s != sends || i != inboxMsgs {
		t.Errorf("after the refusals: %d sends (was %d), %d inbox messages (was %d); want nothing stored", s, sends, i, inboxMsgs)
	}
	after := restAll(t, addr, muse)
	if len(after) != len(before) {
		t.Fatalf("lee's inbox: %d items, was %d", len(after), len(before))
	}
	for i := range after {
		if after[i].ID != before[i].ID || after[i].Acked != before[i].Acked || after[i].Acked {
			t.Errorf("lee's item %d: %s acked %v, was %s acked %v", i, after[i].ID, after[i].Acked, before[i].ID, before[i].Acked)
		}
	}
	// Clients end their MCP sessions: alpd's shutdown waits for open
	// session streams.
	_ = anaMCP.s.Close()
	other.stop(t)
	d.stop(t)
}
