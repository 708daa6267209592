package nlipapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// inboxQuery is the content of an alp.inbox request (and of alp.next, the
// request of the next page): a page of the inbox, or one item by id.
type inboxQuery struct {
	After        string `json:"after,omitempty"`
	Limit        int    `json:"limit,omitempty"`
	IncludeAcked bool   `json:"include_acked,omitempty"`
	ID           string `json:"id,omitempty"`
}

// ackRequest is the structured content of an alp.ack request.
type ackRequest struct {
	IDs []string `json:"ids"`
}

// maxItemID bounds an item id as a request names it; ids are envelope
// ids (36 characters).
const maxItemID = 64

// serveInbox is GET /nlip/inbox: a page of the agent's person's inbox
// (?after=&limit=&include_acked=). A GET carries no message, so there are
// no tokens to echo.
func (a *API) serveInbox(w http.ResponseWriter, r *http.Request) {
	q := unread(replyMedia(r))
	snd, ok := a.inboxCaller(w, r, q)
	if !ok {
		return
	}
	v := r.URL.Query()
	query := inbox.Query{After: v.Get("after")}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			a.fail(w, r, q, newError(http.StatusBadRequest, "invalid_limit", "limit must be an integer from 1 to %d", inbox.MaxPageSize))
			return
		}
		query.Limit = n
	}
	if s := v.Get("include_acked"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			a.fail(w, r, q, newError(http.StatusBadRequest, "invalid_parameter", "include_acked must be true or false"))
			return
		}
		query.IncludeAcked = b
	}
	m, aerr := a.poll(r.Context(), snd, query)
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return
	}
	a.write(w, r, q, http.StatusOK, m)
}

// serveItem is GET /nlip/inbox/{id}: one item of the agent's person's
// inbox, acknowledged or not.
func (a *API) serveItem(w http.ResponseWriter, r *http.Request) {
	q := unread(replyMedia(r))
	snd, ok := a.inboxCaller(w, r, q)
	if !ok {
		return
	}
	m, aerr := a.item(r.Context(), snd, r.PathValue("id"))
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return
	}
	a.write(w, r, q, http.StatusOK, m)
}

// inboxCaller admits the agent of a GET of the inbox; false when it was
// answered.
func (a *API) inboxCaller(w http.ResponseWriter, r *http.Request, q *request) (ingress.Sender, bool) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet+", "+http.MethodOptions)
		a.fail(w, r, q, newError(http.StatusMethodNotAllowed, "method_not_allowed", "GET the inbox"))
		return ingress.Sender{}, false
	}
	snd, aerr := a.authenticate(r)
	if aerr != nil {
		a.fail(w, r, q, aerr)
		return ingress.Sender{}, false
	}
	return snd, true
}

// poll is a page of snd's person's inbox as snd's trust class sees it.
func (a *API) poll(ctx context.Context, snd ingress.Sender, q inbox.Query) (*nlip.Message, *httpjson.Error) {
	if err := a.door.MayRead(snd); err != nil {
		return nil, classify(err)
	}
	page, err := a.s.Inbox().List(ctx, ingress.InboxAgent(snd), q)
	if err != nil {
		return nil, classify(err)
	}
	return a.pageMessage(snd.Address, page, q), nil
}

// item is one item of snd's person's inbox. An id that is not an item of
// theirs is not found, whatever it is.
func (a *API) item(ctx context.Context, snd ingress.Sender, id string) (*nlip.Message, *httpjson.Error) {
	if err := a.door.MayRead(snd); err != nil {
		return nil, classify(err)
	}
	if id == "" || len(id) > maxItemID {
		return nil, classify(inbox.ErrNotFound)
	}
	it, err := a.s.Inbox().Get(ctx, ingress.InboxAgent(snd), id)
	if err != nil {
		return nil, classify(err)
	}
	return itemMessage(it), nil
}

// inboxRequest answers an alp.inbox request (sm, the part at index i): a
// page, or with "id" one item.
func (a *API) inboxRequest(ctx context.Context, snd ingress.Sender, sm nlip.Submessage, i int) (*nlip.Message, *httpjson.Error) {
	// Before the request is read further: a credential that may not read
	// hears that first.
	if err := a.door.MayRead(snd); err != nil {
		return nil, classify(err)
	}
	var q inboxQuery
	if raw, ok := sm.Content.JSON(); ok && !sm.Content.IsNull() {
		if err := decodeStrict(raw, &q); err != nil {
			return nil, pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
				"%s takes a JSON object with after (a cursor), limit (1 to %d) and include_acked, or id alone: %v", labelInbox, inbox.MaxPageSize, err)
		}
	} else if _, isText := sm.Content.Text(); !isText && !sm.Content.IsNull() {
		return nil, pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
			"%s takes structured/json content (or any text, for the first page)", labelInbox)
	}
	if q.ID != "" {
		if q.After != "" || q.Limit != 0 || q.IncludeAcked {
			return nil, pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
				"%s reads one item with id alone, or a page with after, limit and include_acked: not both", labelInbox)
		}
		return a.item(ctx, snd, q.ID)
	}
	return a.poll(ctx, snd, inbox.Query{After: q.After, Limit: q.Limit, IncludeAcked: q.IncludeAcked})
}

// ackRequest answers an alp.ack request (sm, the part at index i): it
// acknowledges the items, all or none.
func (a *API) ackRequest(ctx context.Context, snd ingress.Sender, sm nlip.Submessage, i int) (*nlip.Message, *httpjson.Error) {
	if err := a.door.MayRead(snd); err != nil {
		return nil, classify(err)
	}
	pointer := fmt.Sprintf("/submessages/%d/content", i)
	var ids []string
	if s, ok := sm.Content.Text(); ok {
		ids = []string{s}
	} else if raw, ok := sm.Content.JSON(); ok {
		var req ackRequest
		if err := decodeStrict(raw, &req); err != nil {
			return nil, pointed(http.StatusBadRequest, "invalid_alp_message", pointer,
				`%s takes {"ids": ["<item id>", …]} (or one id as text): %v`, labelAck, err)
		}
		ids = req.IDs
	}
	if len(ids) == 0 || len(ids) > inbox.MaxAckBatch {
		return nil, pointed(http.StatusBadRequest, "invalid_alp_message", pointer,
			`%s acknowledges 1 to %d items at a time: {"ids": ["<item id>", …]}`, labelAck, inbox.MaxAckBatch)
	}
	seen := map[string]bool{}
	unique := ids[:0:0]
	for _, id := range ids {
		if id == "" || len(id) > maxItemID {
			// No item has such an id: not found, as any other.
			return nil, classify(inbox.ErrNotFound)
		}
		if !seen[id] {
			seen[id] = true
			unique = append(unique, id)
		}
	}
	n, err := a.s.Inbox().Ack(ctx, ingress.InboxAgent(snd), unique...)
	if err != nil {
		return nil, classify(err)
	}
	text := fmt.Sprintf("Acknowledged %d %s: not offered to this agent again.", len(unique), plural(len(unique), "item", "items"))
	if already := len(unique) - n; already > 0 {
		text += fmt.Sprintf(" (%d of them %s acknowledged already.)", already, plural(already, "was", "were"))
	}
	return nlip.NewMessage(nlip.Text("english", text),
		structured(labelAcked, map[string]any{"ids": unique, "acknowledged": n})), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// decodeStrict decodes one JSON object into v, refusing unknown names.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}
