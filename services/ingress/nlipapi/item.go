package nlipapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// The inbox as NLIP (docs/nlip.md, "The inbox").
const (
	// itemMessageType marks an inbox item, pushed on a WebSocket or read
	// by id. "item" is no ALP type (those are <name>/v<N>), so an item
	// never reads as a send.
	itemMessageType = "alp:item"
	// Labeled submessages of an item message.
	labelItem   = "alp.item"   // structured/json: the item's structured form (itemJSON)
	labelSender = "alp.sender" // structured/json: the broker's sender line (inbox.Sender)
	// An item's fields are labeled labelBody, as in a send.
	// Labeled submessages of a page of the inbox.
	labelItems = "alp.items" // structured/json: the page's items, each with sender and body
	labelNext  = "alp.next"  // structured/json: the alp.inbox request of the next page
	// labelAcked answers an acknowledgement.
	labelAcked = "alp.acked"
)

// itemJSON is an item's structured form: the alp.item part of an item
// message, and each element of a page's alp.items (which also carry the
// sender and the body, parts of their own in an item message).
type itemJSON struct {
	ID        string           `json:"id"`
	Type      string           `json:"type"`
	InReplyTo string           `json:"in_reply_to,omitempty"`
	Created   time.Time        `json:"created,omitzero"`
	Expires   time.Time        `json:"expires,omitzero"`
	Received  time.Time        `json:"received,omitzero"`
	Outcome   string           `json:"outcome"`
	Acked     bool             `json:"acked"`
	Cursor    string           `json:"cursor"`
	Fields    []fieldJSON      `json:"fields"`
	Held      []inbox.Held     `json:"held"`
	Untrusted *inbox.Untrusted `json:"untrusted,omitempty"`

	Sender *inbox.Sender   `json:"sender,omitempty"`
	Body   json.RawMessage `json:"body,omitempty"`
}

type fieldJSON struct {
	Pointer  string `json:"pointer"`
	Class    string `json:"class,omitempty"`
	FreeText bool   `json:"free_text,omitempty"`
	Verdict  string `json:"verdict"`
}

func itemObject(it inbox.Item) itemJSON {
	o := itemJSON{ID: it.ID, Type: it.Type, InReplyTo: it.InReplyTo, Created: it.Created, Expires: it.Expires, Received: it.Received,
		Outcome: it.Outcome, Acked: it.Acked, Cursor: it.Cursor, Fields: []fieldJSON{}, Held: append([]inbox.Held{}, it.Held...), Untrusted: it.Untrusted}
	for _, f := range it.Fields {
		o.Fields = append(o.Fields, fieldJSON{Pointer: f.Pointer, Class: f.Class, FreeText: f.FreeText, Verdict: f.Verdict})
	}
	return o
}

// itemMessage is an inbox item as NLIP, the one form every answer and
// push uses: the item rendered for a language model as English text (its
// second line is the sender line the broker wrote, inbox.Render), then the
// structured parts, each labeled: the item, the sender, and the fields of
// the agent's view (none when the view has none).
func itemMessage(it inbox.Item) *nlip.Message {
	m := nlip.NewMessage(nlip.Text("english", inbox.Render(it)),
		structured(labelItem, itemObject(it)),
		structured(labelSender, it.Sender))
	if len(it.Body) > 0 {
		m.Add(rawStructured(labelBody, it.Body))
	}
	m.MessageType = itemMessageType
	return m
}

// rawStructured is a structured/json part holding raw, JSON the broker
// wrote (an item's view); should it not parse, the part says so in text.
func rawStructured(label string, raw []byte) nlip.Submessage {
	c, err := nlip.RawJSONContent(raw)
	if err != nil {
		return nlip.Text("english", fmt.Sprintf("internal error: %s could not be encoded", label)).WithLabel(label)
	}
	return nlip.Structured("json", c).WithLabel(label)
}

// pageOverhead is what a page's message takes besides its items (the
// summary, the labels, alp.next), and itemOverhead what each item adds
// besides its text and structured form.
const (
	pageOverhead = 2 << 10
	itemOverhead = 128
)

// pageMessage is a page of the inbox as one NLIP message: an English
// summary followed by every item rendered, and the structured alp.items
// (each item with its sender and body) and, when more items wait,
// alp.next, the alp.inbox request of the next page. A page that would not
// fit in one NLIP message of the configured size is cut short (never
// below one item), and alp.next continues after the last item it holds.
func (a *API) pageMessage(address string, page inbox.Page, q inbox.Query) *nlip.Message {
	var (
		objs  []json.RawMessage
		texts []string
		size  = pageOverhead
	)
	next := page.Next
	for i, it := range page.Items {
		o := itemObject(it)
		o.Sender, o.Body = &it.Sender, it.Body
		raw, err := json.Marshal(o)
		if err != nil {
			// Our own values always encode; should one not, the page
			// ends before it (or, first on the page, skips it: it stays
			// in the inbox, and Get reads it).
			a.log.Error("nlip: encoding an inbox item", "item", it.ID, "err", err)
			next = it.Cursor
			if i > 0 {
				next = page.Items[i-1].Cursor
			}
			break
		}
		text := inbox.Render(it)
		cost := len(raw) + len(text) + itemOverhead
		if i > 0 && size+cost > a.cfg.Message.MaxMessageBytes {
			next = page.Items[i-1].Cursor
			break
		}
		size += cost
		objs, texts = append(objs, raw), append(texts, text)
	}

	what, one := "unacknowledged items", "unacknowledged item"
	if q.IncludeAcked {
		what, one = "items", "item"
	}
	var b strings.Builder
	switch len(objs) {
	case 0:
		fmt.Fprintf(&b, "No %s in the inbox of %s.", what, address)
	case 1:
		fmt.Fprintf(&b, "1 %s in the inbox of %s.", one, address)
	default:
		fmt.Fprintf(&b, "%d %s in the inbox of %s, oldest first.", len(objs), what, address)
	}
	if len(objs) > 0 {
		fmt.Fprintf(&b, " Acknowledge each item once it is handled (a submessage labeled %q holding its id), "+
			"and reply with a send whose %q names it.", labelAck, labelInReplyTo)
		if next != "" {
			fmt.Fprintf(&b, " More items wait: ask again with the content of the part labeled %q as %q (GET: ?after=%s).", labelNext, labelInbox, next)
		}
		for i, text := range texts {
			fmt.Fprintf(&b, "\n\n[%d of %d]\n%s", i+1, len(texts), strings.TrimRight(text, "\n"))
		}
	}
	if objs == nil {
		objs = []json.RawMessage{}
	}
	m := nlip.NewMessage(nlip.Text("english", b.String()), structured(labelItems, objs))
	if next != "" {
		nq := inboxQuery{After: next, Limit: q.Limit, IncludeAcked: q.IncludeAcked}
		m.Add(structured(labelNext, nq))
	}
	return m
}
