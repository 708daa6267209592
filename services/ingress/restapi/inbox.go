package restapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// PathInbox is the person's inbox as the agent reads it.
const PathInbox = Base + "/inbox"

// ackBody bounds an acknowledgement: up to inbox.MaxAckBatch ids.
const ackBody int64 = 16 << 10

func (a *API) inboxRoutes() []httproute.Route {
	agent := httproute.Agent
	return []httproute.Route{
		{Method: http.MethodGet, Pattern: PathInbox, Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.listInbox)},
		{Method: http.MethodPost, Pattern: PathInbox + "/ack", Caller: agent, BodyLimit: ackBody, Handler: http.HandlerFunc(a.ackItems)},
		{Method: http.MethodGet, Pattern: PathInbox + "/{id}", Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.getItem)},
		{Method: http.MethodPost, Pattern: PathInbox + "/{id}/ack", Caller: agent, BodyLimit: httproute.NoBody, Handler: http.HandlerFunc(a.ackItem)},
		{Method: http.MethodPost, Pattern: PathInbox + "/{id}/reply", Caller: agent, BodyLimit: sendBody, Handler: http.HandlerFunc(a.reply)},
	}
}

// itemJSON is one inbox item as this agent may see it.
type itemJSON struct {
	ID        string     `json:"id"`
	Type      string     `json:"type"`
	InReplyTo string     `json:"in_reply_to,omitempty"`
	Created   time.Time  `json:"created"`
	Expires   *time.Time `json:"expires,omitempty"`
	Received  time.Time  `json:"received"`
	// Sender is the line the broker writes, never taken from the message.
	Sender inbox.Sender `json:"sender"`
	// Outcome is the recipient side's: deliver, deliver_partial or hold.
	Outcome string `json:"outcome"`
	// Body holds the fields this agent's trust class sees, free text
	// wrapped in the untrusted markers.
	Body      json.RawMessage  `json:"body,omitempty"`
	Fields    []itemFieldJSON  `json:"fields"`
	Held      []inbox.Held     `json:"held,omitempty"`
	Untrusted *inbox.Untrusted `json:"untrusted,omitempty"`
	Acked     bool             `json:"acked"`
	// Text is the item rendered for a language model (inbox.Render).
	Text string `json:"text"`
}

type itemFieldJSON struct {
	Pointer  string `json:"pointer"`
	Class    string `json:"class"`
	FreeText bool   `json:"free_text,omitempty"`
	// Verdict: delivered, withheld, held or not_for_this_agent.
	Verdict string `json:"verdict"`
}

func itemView(it inbox.Item) itemJSON {
	out := itemJSON{ID: it.ID, Type: it.Type, InReplyTo: it.InReplyTo, Created: it.Created.UTC(), Received: it.Received.UTC(),
		Sender: it.Sender, Held: it.Held, Untrusted: it.Untrusted, Outcome: it.Outcome, Body: it.Body, Fields: []itemFieldJSON{}, Acked: it.Acked, Text: inbox.Render(it)}
	if !it.Expires.IsZero() {
		e := it.Expires.UTC()
		out.Expires = &e
	}
	for _, f := range it.Fields {
		out.Fields = append(out.Fields, itemFieldJSON{Pointer: f.Pointer, Class: f.Class, FreeText: f.FreeText, Verdict: f.Verdict})
	}
	return out
}

// listInbox is GET /v1/agent/inbox: the items this agent has not
// acknowledged (all with include_acked=true), oldest first.
func (a *API) listInbox(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, mayRead)
	if !ok {
		return
	}
	q := r.URL.Query()
	query := inbox.Query{After: q.Get("after")}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			a.fail(w, r, httpjson.Errorf(http.StatusBadRequest, CodeInvalidLimit, "limit must be a whole number from 1 to %d", MaxPageSize))
			return
		}
		query.Limit = n
	}
	if v := q.Get("include_acked"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			a.fail(w, r, httpjson.Errorf(http.StatusBadRequest, CodeInvalidRequest, "include_acked must be true or false"))
			return
		}
		query.IncludeAcked = b
	}
	page, err := a.s.Inbox().List(r.Context(), ingress.InboxAgent(snd), query)
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	out := listJSON[itemJSON]{Items: make([]itemJSON, 0, len(page.Items)), Next: page.Next}
	for _, it := range page.Items {
		out.Items = append(out.Items, itemView(it))
	}
	httpjson.Write(w, http.StatusOK, out)
}

// getItem is GET /v1/agent/inbox/{id}, acknowledged or not.
func (a *API) getItem(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, mayRead)
	if !ok {
		return
	}
	it, err := a.s.Inbox().Get(r.Context(), ingress.InboxAgent(snd), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	httpjson.Write(w, http.StatusOK, itemView(it))
}

// ackRequest is POST /v1/agent/inbox/ack.
type ackRequest struct {
	IDs []string `json:"ids"`
}

// ackJSON answers an acknowledgement: how many items it acknowledged
// (those acknowledged before are not counted again).
type ackJSON struct {
	Acked int `json:"acked"`
}

// ackItems is POST /v1/agent/inbox/ack {"ids": [...]}: all or nothing.
// Acknowledging changes only this agent's own delivery state, so it takes
// the reading scope.
func (a *API) ackItems(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, mayRead)
	if !ok {
		return
	}
	var req ackRequest
	if e := decode(r, &req); e != nil {
		a.fail(w, r, e)
		return
	}
	a.ack(w, r, snd, req.IDs)
}

// ackItem is POST /v1/agent/inbox/{id}/ack.
func (a *API) ackItem(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, mayRead)
	if !ok {
		return
	}
	a.ack(w, r, snd, []string{r.PathValue("id")})
}

func (a *API) ack(w http.ResponseWriter, r *http.Request, snd ingress.Sender, ids []string) {
	n, err := a.s.Inbox().Ack(r.Context(), ingress.InboxAgent(snd), ids...)
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	httpjson.Write(w, http.StatusOK, ackJSON{Acked: n})
}

// replyRequest is POST /v1/agent/inbox/{id}/reply: the recipient and
// in_reply_to come from the item.
type replyRequest struct {
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
	From string          `json:"from,omitempty"`
}

// reply is POST /v1/agent/inbox/{id}/reply: a message to the item's
// sender, in reply to it, sent through the door like any other (it passes
// policy on both sides). It reads the item, so it takes both scopes.
func (a *API) reply(w http.ResponseWriter, r *http.Request) {
	var req replyRequest
	snd, key, ok := a.admitSend(w, r, mayReply, &req)
	if !ok {
		return
	}
	to, inReplyTo, err := a.s.ReplyTo(r.Context(), snd, r.PathValue("id"))
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	env, e := envelopeOf(to, req.Type, req.Body, "/body")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	env.InReplyTo, env.From = inReplyTo, req.From
	a.submit(w, r, ingress.Submission{Sender: snd, Envelope: env, IdempotencyKey: key}, "/body")
}
