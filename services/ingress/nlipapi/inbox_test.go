package nlipapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/brokertest"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
	"github.com/alpd-project/alpd/services/policy/relationships"
)

// deliveryRig is the rig with a second person, lee, and agents that have
// names: ana's company agent dot, lee's company agent claude and consumer
// agent muse. Ana and lee are connected and both opted in to free text.
type deliveryRig struct {
	*rig
	dot, claude, muse brokertest.Agent
}

func newDeliveryRig(t testing.TB, o rigOptions) *deliveryRig {
	t.Helper()
	unlimited := ingress.Rate{Limit: 1e6, Burst: 1 << 20}
	o.door.PerAgent, o.door.PerPerson, o.door.PerTenant = unlimited, unlimited, unlimited
	r := &deliveryRig{rig: newRig(t, o)}
	scopes := []string{"alp.send", "alp.read"}
	r.dot = r.br.NamedAgent(t, brokertest.AgentSpec{Tenant: tenant, Subject: "sub-ana", Address: "ana@example.org",
		AgentID: "agent-ana-dot", Name: "dot", Company: true, Scopes: scopes})
	r.claude = r.br.NamedAgent(t, brokertest.AgentSpec{Tenant: tenant, Subject: "sub-lee", Address: "lee@example.org",
		AgentID: "agent-lee-claude", Name: "claude", Company: true, Scopes: scopes})
	r.muse = r.br.NamedAgent(t, brokertest.AgentSpec{Tenant: tenant, Subject: "sub-lee", Address: "lee@example.org",
		AgentID: "agent-lee-muse", Name: "muse", Scopes: scopes})
	r.br.OptInFreeText(t, tenant, r.claude.Person.ID)
	r.br.OptInFreeText(t, tenant, r.dot.Person.ID)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rels, err := relationships.Open(ctx, r.b.Bus(), []string{tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rels.Close)
	c, err := rels.Request(ctx, tenant, relationships.Party{Person: r.dot.Person.ID}, r.claude.Person.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rels.Accept(ctx, tenant, r.claude.Person.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	return r
}

// sendNLIP is an ALP send as NLIP JSON: typ with body, the parts given
// (alp.to and the like) and the test tokens.
func sendNLIP(typ, body string, parts ...string) []byte {
	return nlipJSON("alp:"+typ, `{"label":"alp.body","format":"structured","subformat":"json","content":`+body+`}`, parts...)
}

func toPart(addr string) string {
	return `{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:` + addr + `"}`
}

func textPart(label, s string) string {
	return `{"label":"` + label + `","format":"text","subformat":"english","content":"` + s + `"}`
}

func jsonPart(label, content string) string {
	return `{"label":"` + label + `","format":"structured","subformat":"json","content":` + content + `}`
}

const briefingBody = `{"summary":"Q3 on track","as_of":"2026-11-30T10:00:00Z","pipeline":{"currency":"EUR","value":"120000.00"}}`

// deliver has a's agent send msg over HTTP and waits until it is decided
// for delivery (the connection may not have reached policy yet); it
// returns the envelope id.
func (r *deliveryRig) deliver(t testing.TB, a brokertest.Agent, msg []byte) string {
	t.Helper()
	id, _ := r.deliverResult(t, a, msg)["envelope_id"].(string)
	return id
}

// deliverResult is deliver's alp.result.
func (r *deliveryRig) deliverResult(t testing.TB, a brokertest.Agent, msg []byte) map[string]any {
	t.Helper()
	var res map[string]any
	testkit.Eventually(t, 10*time.Second, func() error {
		resp, reply := r.post(t, "/nlip/", a.Token, "application/json", msg)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, textOf(reply))
		}
		res = result(t, reply)
		if o := res["outcome"]; o != "deliver" && o != "deliver_partial" {
			return fmt.Errorf("outcome %v: %s", o, textOf(reply))
		}
		return nil
	}, "the send is delivered")
	return res
}

// note is a note/v1 from ana's dot to lee.
func note(text string, parts ...string) []byte {
	return sendNLIP("note/v1", `{"text":"`+text+`"}`, append([]string{toPart("lee@example.org")}, parts...)...)
}

// get is a GET of path with a's token: the status and the NLIP answer.
func (r *rig) get(t testing.TB, path, token string) (*http.Response, *nlip.Message) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return r.do(t, req)
}

// part decodes the JSON of m's part labeled label into v; false when m has
// no such part.
func part(t testing.TB, m *nlip.Message, label string, v any) bool {
	t.Helper()
	sm, ok := m.FindLabel(label)
	if !ok {
		return false
	}
	raw, ok := sm.Content.JSON()
	if !ok {
		t.Fatalf("%s is not JSON: %+v", label, sm)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
	return true
}

// pageItem is an element of alp.items, as a client reads it.
type pageItem struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	InReplyTo string `json:"in_reply_to"`
	Acked     bool   `json:"acked"`
	Cursor    string `json:"cursor"`
	Fields    []struct {
		Pointer, Verdict string
	} `json:"fields"`
	Held []struct {
		Kind     string   `json:"kind"`
		Pointers []string `json:"pointers"`
	} `json:"held"`
	Untrusted *struct {
		Open, Close string
	} `json:"untrusted"`
	Sender struct {
		Text, Address, Agent, Attestation string
		TrustClass                        string `json:"trust_class"`
		OwnAgent                          bool   `json:"own_agent"`
	} `json:"sender"`
	Body map[string]any `json:"body"`
}

func pageOf(t testing.TB, m *nlip.Message) (items []pageItem, next map[string]any) {
	t.Helper()
	if !part(t, m, "alp.items", &items) {
		t.Fatalf("no alp.items: %+v", m)
	}
	part(t, m, "alp.next", &next)
	return items, next
}

func ids(items []pageItem) []string {
	var out []string
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

// waitItems polls a's inbox until it lists n unacknowledged items.
func (r *deliveryRig) waitItems(t testing.TB, a brokertest.Agent, n int) []pageItem {
	t.Helper()
	var items []pageItem
	testkit.Eventually(t, 10*time.Second, func() error {
		resp, m := r.get(t, "/nlip/inbox", a.Token)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d %s", resp.StatusCode, textOf(m))
		}
		if items, _ = pageOf(t, m); len(items) != n {
			return fmt.Errorf("%d items, want %d", len(items), n)
		}
		return nil
	}, "the inbox lists the items")
	return items
}

// TestInboxOverHTTP: GET /nlip/inbox pages the agent's unacknowledged
// items in its trust class's view, GET /nlip/inbox/{id} reads one as an
// item message (the sender line, the structured parts), alp.inbox on POST
// is the same poll, alp.ack acknowledges (all or nothing, per agent); what
// is not the person's is not found, like what does not exist.
func TestInboxOverHTTP(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{})
	b1 := r.deliver(t, r.dot, sendNLIP("briefing.reply/v1", briefingBody, toPart("lee@example.org")))
	n2 := r.deliver(t, r.dot, note("status: all green"))
	n3 := r.deliver(t, r.dot, note("status: <<untrusted:x>> amber"))
	want := []string{b1, n2, n3}

	// The company agent's page: every item, the confidential figure, the
	// broker's sender line in the text and in each item.
	items := r.waitItems(t, r.claude, 3)
	if !slices.Equal(ids(items), want) {
		t.Fatalf("items %v, want %v oldest first", ids(items), want)
	}
	resp, page := r.get(t, "/nlip/inbox", r.claude.Token)
	text := textOf(page)
	if resp.StatusCode != http.StatusOK || page.MessageType != "" || page.Subformat != "english" ||
		!strings.HasPrefix(text, "3 unacknowledged items in the inbox of lee@example.org, oldest first.") ||
		strings.Count(text, "\nfrom ana@example.org, verified by this broker\n") != 3 {
		t.Fatalf("page %d:\n%s", resp.StatusCode, text)
	}
	if s := items[0].Sender; s.Text != "from ana@example.org, verified by this broker" || s.Address != "ana@example.org" ||
		s.Agent != "dot" || s.TrustClass != "company" || s.Attestation != "attested" || s.OwnAgent {
		t.Errorf("sender %+v", s)
	}
	if items[0].Body["pipeline"] == nil || items[0].Type != "briefing.reply/v1" || items[0].Acked {
		t.Errorf("the company agent's briefing %+v", items[0])
	}
	if u := items[2].Untrusted; u == nil || !strings.HasPrefix(items[2].Body["text"].(string), u.Open) ||
		strings.Contains(items[2].Body["text"].(string), "<<untrusted:x>>") {
		t.Errorf("free text not wrapped: %+v %v", u, items[2].Body)
	}
	// The consumer agent's: the same items, the figure held.
	mItems := r.waitItems(t, r.muse, 3)
	if mItems[0].ID != b1 || mItems[0].Body["pipeline"] != nil || len(mItems[0].Held) == 0 ||
		mItems[0].Held[0].Kind != "confidential_fields" || !slices.Contains(mItems[0].Held[0].Pointers, "/pipeline/value") {
		t.Errorf("the consumer agent's briefing %+v", mItems[0])
	}

	// Pages of two: alp.next is the alp.inbox request of the next page.
	resp, page = r.get(t, "/nlip/inbox?limit=2", r.claude.Token)
	items, next := pageOf(t, page)
	if resp.StatusCode != http.StatusOK || !slices.Equal(ids(items), want[:2]) || next["after"] != items[1].Cursor || next["limit"] != 2.0 ||
		!strings.Contains(textOf(page), "More items wait") {
		t.Fatalf("first page of two: %v %v\n%s", ids(items), next, textOf(page))
	}
	after, _ := json.Marshal(next)
	resp, page = r.post(t, "/nlip/", r.claude.Token, "application/json", nlipJSON("", jsonPart("alp.inbox", string(after))))
	items, next = pageOf(t, page)
	if resp.StatusCode != http.StatusOK || !slices.Equal(ids(items), want[2:]) || next != nil {
		t.Fatalf("the next page by alp.inbox: %d %v %v", resp.StatusCode, ids(items), next)
	}
	echoed(t, page)
	if _, page = r.get(t, "/nlip/inbox?limit=2&after="+items[0].Cursor, r.claude.Token); len(pageOf2(t, page)) != 0 {
		t.Errorf("after the last item: %s", textOf(page))
	}

	// One item as an item message.
	resp, m := r.get(t, "/nlip/inbox/"+b1, r.claude.Token)
	lines := strings.Split(textOf(m), "\n")
	if resp.StatusCode != http.StatusOK || m.MessageType != "alp:item" || len(lines) < 3 ||
		lines[0] != "ALP message briefing.reply/v1 (item "+b1+")" || lines[1] != "from ana@example.org, verified by this broker" {
		t.Fatalf("item %d %q:\n%s", resp.StatusCode, m.MessageType, textOf(m))
	}
	var it pageItem
	var sender map[string]any
	var body map[string]any
	if !part(t, m, "alp.item", &it) || it.ID != b1 || it.Cursor == "" || len(it.Fields) == 0 ||
		!part(t, m, "alp.sender", &sender) || sender["text"] != lines[1] || sender["verified_by"] != "this broker" ||
		!part(t, m, "alp.body", &body) || body["pipeline"] == nil {
		t.Errorf("item parts %+v %v %v", it, sender, body)
	}
	// The same on POST, with the tokens.
	_, byPost := r.post(t, "/nlip/", r.claude.Token, "application/json", nlipJSON("", jsonPart("alp.inbox", `{"id":"`+b1+`"}`)))
	if byPost.MessageType != "alp:item" || !strings.HasPrefix(textOf(byPost), lines[0]+"\n"+lines[1]+"\n") {
		t.Errorf("item by alp.inbox: %+v", byPost)
	}
	echoed(t, byPost)

	// Ana's agent cannot read lee's item: not found, exactly as an item
	// that does not exist.
	_, theirs := r.get(t, "/nlip/inbox/"+b1, r.dot.Token)
	_, none := r.get(t, "/nlip/inbox/01890a5d-ac96-774b-bcce-b302099a8057", r.claude.Token)
	if e, f := apiError(t, theirs), apiError(t, none); e["code"] != "not_found" || e["status"] != 404.0 || fmt.Sprint(e) != fmt.Sprint(f) ||
		textOf(theirs) != textOf(none) {
		t.Errorf("another person's item %v; an absent one %v", e, f)
	}

	// Acknowledged by claude: gone from claude's page, still on muse's.
	ack := nlipJSON("", jsonPart("alp.ack", `{"ids":["`+b1+`"]}`))
	resp, m = r.post(t, "/nlip/", r.claude.Token, "application/json", ack)
	var acked struct {
		IDs          []string `json:"ids"`
		Acknowledged int      `json:"acknowledged"`
	}
	if resp.StatusCode != http.StatusOK || !part(t, m, "alp.acked", &acked) || acked.Acknowledged != 1 || !slices.Equal(acked.IDs, []string{b1}) ||
		!strings.HasPrefix(textOf(m), "Acknowledged 1 item") {
		t.Fatalf("ack %d %+v %s", resp.StatusCode, acked, textOf(m))
	}
	echoed(t, m)
	if _, m = r.post(t, "/nlip/", r.claude.Token, "application/json", ack); !part(t, m, "alp.acked", &acked) || acked.Acknowledged != 0 ||
		!strings.Contains(textOf(m), "already") {
		t.Errorf("a second ack: %s", textOf(m))
	}
	if items := r.waitItems(t, r.claude, 2); !slices.Equal(ids(items), want[1:]) {
		t.Errorf("after the ack: %v", ids(items))
	}
	r.waitItems(t, r.muse, 3)
	_, page = r.get(t, "/nlip/inbox?include_acked=true", r.claude.Token)
	if items, _ := pageOf(t, page); len(items) != 3 || !items[0].Acked || items[1].Acked ||
		!strings.HasPrefix(textOf(page), "3 items in the inbox") {
		t.Errorf("with acknowledged items: %+v", items)
	}

	// Acknowledging another person's item is not found, and all or
	// nothing: nothing changed.
	for _, tc := range []struct {
		name  string
		agent brokertest.Agent
		ids   string
	}{
		{"ana acks lee's item", r.dot, `["` + n2 + `"]`},
		{"one unknown id among known", r.claude, `["` + n2 + `","01890a5d-ac96-774b-bcce-b302099a8057"]`},
	} {
		resp, m := r.post(t, "/nlip/", tc.agent.Token, "application/json", nlipJSON("", jsonPart("alp.ack", `{"ids":`+tc.ids+`}`)))
		if e := apiError(t, m); resp.StatusCode != http.StatusNotFound || e["code"] != "not_found" || fmt.Sprint(e) != fmt.Sprint(apiError(t, none)) {
			t.Errorf("%s: %d %v", tc.name, resp.StatusCode, e)
		}
		echoed(t, m)
	}
	if items := r.waitItems(t, r.claude, 2); !slices.Equal(ids(items), want[1:]) {
		t.Errorf("a refused ack changed the inbox: %v", ids(items))
	}
}

// pageOf2 is the ids of a page.
func pageOf2(t testing.TB, m *nlip.Message) []string {
	t.Helper()
	items, _ := pageOf(t, m)
	return ids(items)
}

// TestInboxRefusals: bad cursors and page sizes, a credential without
// alp.read (403 with the challenge, nothing changed), malformed requests;
// the POST answers echo the tokens.
func TestInboxRefusals(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{})
	id := r.deliver(t, r.dot, note("status: all green"))
	r.waitItems(t, r.claude, 1)
	sendOnly := r.br.Mint(t, r.claude, accesstoken.ClassCompany, "alp.send")

	gets := []struct {
		path, token string
		status      int
		code        string
	}{
		{"/nlip/inbox?after=x", r.claude.Token, 400, "invalid_cursor"},
		{"/nlip/inbox?after=YzEuMA", r.claude.Token, 400, "invalid_cursor"},
		{"/nlip/inbox?limit=101", r.claude.Token, 400, "invalid_limit"},
		{"/nlip/inbox?limit=-1", r.claude.Token, 400, "invalid_limit"},
		{"/nlip/inbox?limit=ten", r.claude.Token, 400, "invalid_limit"},
		{"/nlip/inbox?include_acked=perhaps", r.claude.Token, 400, "invalid_parameter"},
		{"/nlip/inbox", sendOnly, 403, "insufficient_scope"},
		{"/nlip/inbox/" + id, sendOnly, 403, "insufficient_scope"},
		{"/nlip/inbox", "", 401, "authentication_required"},
		{"/nlip/inbox/" + strings.Repeat("a", 65), r.claude.Token, 404, "not_found"},
	}
	for _, tc := range gets {
		resp, m := r.get(t, tc.path, tc.token)
		if e := apiError(t, m); resp.StatusCode != tc.status || e["code"] != tc.code {
			t.Errorf("GET %s: %d %v; want %d %s", tc.path, resp.StatusCode, e, tc.status, tc.code)
		}
		if tc.status == 403 && !strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="alp.read"`) {
			t.Errorf("GET %s: challenge %q", tc.path, resp.Header.Get("WWW-Authenticate"))
		}
	}
	resp, m := r.post(t, "/nlip/inbox", r.claude.Token, "application/json", nil)
	if e := apiError(t, m); resp.StatusCode != http.StatusMethodNotAllowed || e["code"] != "method_not_allowed" {
		t.Errorf("POST /nlip/inbox: %d %v", resp.StatusCode, e)
	}

	posts := []struct {
		name, token string
		msg         []byte
		status      int
		code        string
	}{
		{"a cursor not the inbox's", r.claude.Token, nlipJSON("", jsonPart("alp.inbox", `{"after":"x"}`)), 400, "invalid_cursor"},
		{"an oversized page", r.claude.Token, nlipJSON("", jsonPart("alp.inbox", `{"limit":500}`)), 400, "invalid_limit"},
		{"an unknown query name", r.claude.Token, nlipJSON("", jsonPart("alp.inbox", `{"cursor":"x"}`)), 400, "invalid_alp_message"},
		{"an id and a page", r.claude.Token, nlipJSON("", jsonPart("alp.inbox", `{"id":"x","limit":2}`)), 400, "invalid_alp_message"},
		{"inbox and ack at once", r.claude.Token, nlipJSON("", jsonPart("alp.inbox", `{}`), jsonPart("alp.ack", `{"ids":["x"]}`)), 400, "invalid_alp_message"},
		{"a send and an ack at once", r.claude.Token, sendNLIP("note/v1", `{"text":"x"}`, toPart("ana@example.org"), jsonPart("alp.ack", `{"ids":["x"]}`)), 400, "invalid_alp_message"},
		{"an empty ack", r.claude.Token, nlipJSON("", jsonPart("alp.ack", `{"ids":[]}`)), 400, "invalid_alp_message"},
		{"an ack of 101", r.claude.Token, nlipJSON("", jsonPart("alp.ack", `{"ids":[`+strings.TrimSuffix(strings.Repeat(`"x",`, 101), ",")+`]}`)), 400, "invalid_alp_message"},
		{"an ack that is no list", r.claude.Token, nlipJSON("", jsonPart("alp.ack", `{"ids":"x"}`)), 400, "invalid_alp_message"},
		{"an ack by text of an unknown id", r.claude.Token, nlipJSON("", textPart("alp.ack", "nope")), 404, "not_found"},
		{"a poll without alp.read", sendOnly, nlipJSON("", jsonPart("alp.inbox", `{}`)), 403, "insufficient_scope"},
		{"an ack without alp.read", sendOnly, nlipJSON("", jsonPart("alp.ack", `{"ids":["`+id+`"]}`)), 403, "insufficient_scope"},
		{"a reply by item without alp.read", sendOnly, sendNLIP("note/v1", `{"text":"ok"}`, textPart("alp.in_reply_to", id)), 403, "insufficient_scope"},
	}
	for _, tc := range posts {
		resp, m := r.post(t, "/nlip/", tc.token, "application/json", tc.msg)
		if e := apiError(t, m); resp.StatusCode != tc.status || e["code"] != tc.code {
			t.Errorf("%s: %d %v; want %d %s", tc.name, resp.StatusCode, e, tc.status, tc.code)
		}
		if tc.status == 403 && !strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="alp.read"`) {
			t.Errorf("%s: challenge %q", tc.name, resp.Header.Get("WWW-Authenticate"))
		}
		echoed(t, m)
	}
	// Nothing was acknowledged.
	if items := r.waitItems(t, r.claude, 1); items[0].ID != id || items[0].Acked {
		t.Errorf("after the refusals: %+v", items)
	}
}

// TestReplyAndClaimedSender: a send naming an inbox item in
// alp.in_reply_to and no alp.to goes to the item's sender, threaded; an
// item that is not the person's is not found; a message whose alp.from
// names anyone but the credential's person is refused before anything is
// stored.
func TestReplyAndClaimedSender(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{})
	id := r.deliver(t, r.dot, note("can we meet?"))
	r.waitItems(t, r.claude, 1)

	res := r.deliverResult(t, r.claude, sendNLIP("note/v1", `{"text":"yes"}`, textPart("alp.in_reply_to", id)))
	reply, _ := res["envelope_id"].(string)
	if res["to"] != "ana@example.org" {
		t.Errorf("reply result %v", res)
	}
	var got pageItem
	testkit.Eventually(t, 10*time.Second, func() error {
		_, page := r.get(t, "/nlip/inbox", r.dot.Token)
		items, _ := pageOf(t, page)
		for _, it := range items {
			if it.ID == reply {
				got = it
				return nil
			}
		}
		return errors.New("no reply yet")
	}, "the reply reaches ana")
	if got.InReplyTo != id || got.Sender.Text != "from lee@example.org, verified by this broker" {
		t.Errorf("reply %+v", got)
	}

	before := r.sendCount(t)
	for _, tc := range []struct {
		name   string
		agent  brokertest.Agent
		msg    []byte
		status int
		code   string
	}{
		{"a reply to another person's item", r.dot, sendNLIP("note/v1", `{"text":"x"}`, textPart("alp.in_reply_to", id)), 404, "not_found"},
		{"a reply to no item", r.claude, sendNLIP("note/v1", `{"text":"x"}`, textPart("alp.in_reply_to", "01890a5d-ac96-774b-bcce-b302099a8057")), 404, "not_found"},
		{"claiming lee's address", r.dot, note("hi", `{"label":"alp.from","format":"structured","subformat":"uri","content":"acct:lee@example.org"}`), 403, "sender_mismatch"},
		{"claiming another address as text", r.dot, note("hi", textPart("alp.from", "bo@example.org")), 403, "sender_mismatch"},
		{"a from that is no address", r.dot, note("hi", textPart("alp.from", "ana")), 400, "invalid_alp_message"},
	} {
		resp, m := r.post(t, "/nlip/", tc.agent.Token, "application/json", tc.msg)
		if e := apiError(t, m); resp.StatusCode != tc.status || e["code"] != tc.code {
			t.Errorf("%s: %d %v; want %d %s", tc.name, resp.StatusCode, e, tc.status, tc.code)
		} else if tc.code == "not_found" && e["pointer"] != "/submessages/3/content" {
			t.Errorf("%s: pointer %v", tc.name, e["pointer"])
		}
		echoed(t, m)
	}
	if after := r.sendCount(t); after != before {
		t.Errorf("refused sends stored %d events", after-before)
	}
	// Her own address, in any spelling, is no claim of another's.
	r.deliver(t, r.dot, note("hi", textPart("alp.from", "acct:ANA@example.org")))
}

// readFrame reads one NLIP message from c within d.
func readFrame(t testing.TB, c *websocket.Conn, d time.Duration) (*nlip.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	typ, data, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ == websocket.MessageBinary {
		return nlip.DecodeCBOR(data, nlip.Limits{})
	}
	return nlip.DecodeJSON(data, nlip.Limits{})
}

// pushedID is the id of a pushed item message.
func pushedID(t testing.TB, m *nlip.Message) string {
	t.Helper()
	var it pageItem
	if m.MessageType != "alp:item" || !part(t, m, "alp.item", &it) {
		t.Fatalf("not an item message: %+v", m)
	}
	if len(m.Tokens()) != 0 {
		t.Errorf("a push carries tokens: %+v", m.Tokens())
	}
	return it.ID
}

// readPushes reads n item messages from c.
func readPushes(t testing.TB, c *websocket.Conn, n int) []string {
	t.Helper()
	var out []string
	for range n {
		m, err := readFrame(t, c, 10*time.Second)
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		out = append(out, pushedID(t, m))
	}
	return out
}

// TestInboxPushedOnWebSocket: a connection with alp.read gets every
// unacknowledged item pushed, oldest first, once, then new ones as they
// arrive; acknowledged on the WebSocket, an item is not pushed again; a
// new connection gets the unacknowledged ones again with the same ids. A
// connection without alp.read gets no pushes.
func TestInboxPushedOnWebSocket(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{})
	first := []string{r.deliver(t, r.dot, note("one")), r.deliver(t, r.dot, note("two"))}
	r.waitItems(t, r.claude, 2)

	c, _, err := r.dial(t, "/nlip/ws/text", r.claude.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readPushes(t, c, 2); !slices.Equal(got, first) {
		t.Fatalf("pushed %v, want %v", got, first)
	}
	third := r.deliver(t, r.dot, note("three"))
	m, err := readFrame(t, c, 10*time.Second)
	if err != nil || pushedID(t, m) != third {
		t.Fatalf("the new item: %+v %v", m, err)
	}
	if line := strings.Split(textOf(m), "\n")[1]; line != "from ana@example.org, verified by this broker" {
		t.Errorf("pushed sender line %q", line)
	}
	// Acknowledge the first on the WebSocket.
	if _, reply := exchange(t, c, websocket.MessageText, nlipJSON("", textPart("alp.ack", first[0]))); !strings.HasPrefix(textOf(reply), "Acknowledged 1 item") {
		t.Fatalf("ack on the WebSocket: %+v", reply)
	} else {
		echoed(t, reply)
	}
	c.Close(websocket.StatusNormalClosure, "")

	// A new connection (CBOR): the unacknowledged ones again, same ids,
	// and never the acknowledged one: the next push is the next new item.
	cb, _, err := r.dial(t, "/nlip/ws", r.claude.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readPushes(t, cb, 2); !slices.Equal(got, []string{first[1], third}) {
		t.Fatalf("after reconnecting: %v, want %v", got, []string{first[1], third})
	}
	fourth := r.deliver(t, r.dot, note("four"))
	if got := readPushes(t, cb, 1); got[0] != fourth {
		t.Fatalf("next push %v, want %s", got, fourth)
	}
	// The consumer agent has acknowledged nothing: it gets all four.
	mc, _, err := r.dial(t, "/nlip/ws/text", r.muse.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := readPushes(t, mc, 4); !slices.Equal(got, []string{first[0], first[1], third, fourth}) {
		t.Errorf("muse: %v", got)
	}

	// Without alp.read: no pushes; the first frame is the answer.
	sendOnly := r.br.Mint(t, r.claude, accesstoken.ClassCompany, "alp.send")
	sc, _, err := r.dial(t, "/nlip/ws/text", sendOnly, "")
	if err != nil {
		t.Fatal(err)
	}
	r.deliver(t, r.dot, note("five"))
	r.waitItems(t, r.claude, 4)
	if _, reply := exchange(t, sc, websocket.MessageText, nlipJSON("", "")); reply.MessageType == "alp:item" {
		t.Errorf("a send-only connection got a push: %+v", reply)
	}
}

// TestSlowWebSocketConsumer: two WebSockets of one agent, one of which
// never reads. The other gets every item promptly; the stalled one is
// closed once it has not read what was pushed within the write timeout,
// with a reason; nothing is lost (every item is still unacknowledged).
func TestSlowWebSocketConsumer(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{door: ingress.DoorConfig{DecisionWait: time.Second}})
	api, srv := r.ownAPI(t, nlipapi.Config{WSWriteTimeout: 2 * time.Second, WSPushWindow: 2})

	stalled, _, err := dialURL(t, srv.URL, "/nlip/ws/text", r.claude.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	reader, _, err := dialURL(t, srv.URL, "/nlip/ws/text", r.claude.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	arrivals := keepReading(reader)

	const n = 6
	var sent []string
	for i := range n {
		id := r.deliver(t, r.dot, note(fmt.Sprintf("item %d", i)))
		sent = append(sent, id)
		// Promptly, though the agent's other connection is stalled: the
		// push takes milliseconds; seconds allow for a loaded machine.
		select {
		case f := <-arrivals:
			if f.err != nil || pushedID(t, f.m) != id {
				t.Fatalf("item %d: %+v, want %s", i, f, id)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("item %d was not pushed to the reading connection within 5s", i)
		}
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if s := api.WebSocketStats(); s.ClosedTooSlow != 1 || s.Open != 1 {
			return fmt.Errorf("stats %+v", s)
		}
		return nil
	}, "the stalled connection is closed")

	// What the stalled one had been sent (one window), then the reason.
	var got []string
	for {
		m, err := readFrame(t, stalled, 5*time.Second)
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			if ce.Code != websocket.StatusPolicyViolation || !strings.HasPrefix(ce.Reason, "too slow") {
				t.Errorf("closed with %v", ce)
			}
			break
		}
		if err != nil {
			t.Fatalf("stalled connection: %v", err)
		}
		got = append(got, pushedID(t, m))
	}
	if len(got) == 0 || len(got) > 2 || !slices.Equal(got, sent[:len(got)]) {
		t.Errorf("the stalled connection was sent %v (window 2)", got)
	}
	// Nothing lost: every item waits, unacknowledged.
	if items := r.waitItems(t, r.claude, n); !slices.Equal(ids(items), sent) {
		t.Errorf("inbox %v, want %v", ids(items), sent)
	}
	// And the reading connection is still served.
	last := r.deliver(t, r.dot, note("after"))
	if f := <-arrivals; f.err != nil || pushedID(t, f.m) != last {
		t.Errorf("after the close: %+v", f)
	}
}

// TestWatchingWebSocketKeepsAlive: a connection that only listens sends
// nothing, yet stays open past the idle timeout while it answers the
// broker's pings; one that stops reading is closed as too slow. A
// connection that does not watch (no alp.read) still closes when idle.
func TestWatchingWebSocketKeepsAlive(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{door: ingress.DoorConfig{DecisionWait: 500 * time.Millisecond}})
	_, srv := r.ownAPI(t, nlipapi.Config{WSIdleTimeout: 300 * time.Millisecond, WSWriteTimeout: 500 * time.Millisecond})
	listening, _, err := dialURL(t, srv.URL, "/nlip/ws/text", r.claude.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	heard := keepReading(listening)
	select {
	case f := <-heard:
		t.Fatalf("a listening connection past the idle timeout: %+v", f)
	case <-time.After(2 * time.Second):
	}
	deaf, _, err := dialURL(t, srv.URL, "/nlip/ws/text", r.claude.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // pinged, not answering
	var ce websocket.CloseError
	if _, err := readFrame(t, deaf, 10*time.Second); !errors.As(err, &ce) || !strings.HasPrefix(ce.Reason, "too slow") {
		t.Errorf("a connection that does not answer pings: %v", err)
	}
	sendOnly := r.br.Mint(t, r.claude, accesstoken.ClassCompany, "alp.send")
	idle, _, err := dialURL(t, srv.URL, "/nlip/ws/text", sendOnly, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readFrame(t, idle, 5*time.Second); !errors.As(err, &ce) || ce.Reason != "idle timeout" {
		t.Errorf("an idle connection that does not watch: %v", err)
	}
	// The listening one is still open, and still hears.
	select {
	case f := <-heard:
		t.Errorf("the listening connection: %+v", f)
	default:
	}
	id := r.deliver(t, r.dot, note("still there?"))
	if f := <-heard; f.err != nil || pushedID(t, f.m) != id {
		t.Errorf("the listening connection: %+v", f)
	}
}

// frame is one message read from a WebSocket, or why reading ended.
type frame struct {
	m   *nlip.Message
	err error
	at  time.Time // when it was read
}

// keepReading reads c until it fails, as an agent that listens does (and
// so answers pings), and hands on every message and the final error.
func keepReading(c *websocket.Conn) <-chan frame {
	out := make(chan frame, 100)
	go func() {
		defer close(out)
		for {
			typ, data, err := c.Read(context.Background())
			at := time.Now()
			if err != nil {
				out <- frame{err: err, at: at}
				return
			}
			var m *nlip.Message
			if typ == websocket.MessageBinary {
				m, err = nlip.DecodeCBOR(data, nlip.Limits{})
			} else {
				m, err = nlip.DecodeJSON(data, nlip.Limits{})
			}
			out <- frame{m: m, err: err, at: at}
		}
	}()
	return out
}

// TestInboxPageFitsOneMessage: a page that would not fit in one NLIP
// message of the configured size ends early, and alp.next goes on from
// its last item: paging reads every item once.
func TestInboxPageFitsOneMessage(t *testing.T) {
	r := newDeliveryRig(t, rigOptions{nlip: nlipapi.Config{Message: nlip.Limits{MaxMessageBytes: 8 << 10}}})
	var want []string
	for i := range 5 {
		want = append(want, r.deliver(t, r.dot, sendNLIP("briefing.reply/v1",
			`{"summary":"`+strings.Repeat(fmt.Sprint(i), 200)+`","pipeline":{"currency":"EUR","value":"1.00"}}`, toPart("lee@example.org"))))
	}
	// Waited for in the store: every page of this rig is cut.
	lee := inbox.Agent{Tenant: tenant, PersonID: r.claude.Person.ID, AgentID: r.claude.AgentID, Class: alpv1.TrustClass_TRUST_CLASS_COMPANY}
	testkit.Eventually(t, 10*time.Second, func() error {
		page, err := r.b.Ingress().Inbox().List(context.Background(), lee, inbox.Query{})
		if err == nil && len(page.Items) != 5 {
			err = fmt.Errorf("%d items", len(page.Items))
		}
		return err
	}, "the five items are filed")
	var got []string
	query := "/nlip/inbox"
	for pages := 0; ; pages++ {
		resp, m := r.get(t, query, r.claude.Token)
		data, err := nlip.EncodeJSON(m)
		if resp.StatusCode != http.StatusOK || err != nil || len(data) > 8<<10 {
			t.Fatalf("page %d: %d, %d bytes, %v", pages, resp.StatusCode, len(data), err)
		}
		items, next := pageOf(t, m)
		if len(items) == 0 || len(items) == 5 {
			t.Fatalf("page %d has %d items: the limit should cut it", pages, len(items))
		}
		got = append(got, ids(items)...)
		if next == nil {
			break
		}
		if next["after"] != items[len(items)-1].Cursor {
			t.Fatalf("alp.next %v does not follow the last item", next)
		}
		query = "/nlip/inbox?after=" + next["after"].(string)
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged %v, want %v", got, want)
	}
}
