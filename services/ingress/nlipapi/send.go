package nlipapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
)

// The agent → person mapping (docs/nlip.md, "Sending an ALP message").
const (
	// typePrefix starts the messagetype of an NLIP message that asks to
	// send a typed ALP message: "alp:meeting.request/v1".
	typePrefix = "alp:"
	// Labeled submessages of a send.
	labelTo        = "alp.to"          // structured/uri "acct:bob@example.com" (RFC 7565), or text
	labelBody      = "alp.body"        // structured/json: the typed body, a JSON object
	labelInReplyTo = "alp.in_reply_to" // text: the envelope id answered (an inbox item's id: the reply goes to its sender)
	labelFrom      = "alp.from"        // structured/uri or text: who the agent says sends; must be the credential's person
	labelNMP       = "nmp"             // structured/json: the agent's NMP header (nmp_message)
	// labelNamespace, then a dot, starts the label of every part alpd
	// reads.
	labelNamespace = "alp"
	// Labeled submessages of the inbox's requests (docs/nlip.md): read
	// the inbox (structured/json inboxQuery), acknowledge items
	// (structured/json {"ids": [...]}, or one id as text).
	labelInbox = "alp.inbox"
	labelAck   = "alp.ack"
	// Labeled submessages of replies.
	labelResult = "alp.result"
	labelError  = "alp.error"
	// idempotencySubformat is the token submessage (format "token") with
	// the agent's idempotency key; the HTTP header Idempotency-Key is the
	// same thing.
	idempotencySubformat = "idempotency"
	maxIdempotencyKey    = 255
	maxTypeLength        = 200
)

// send is one agent's request to send, taken from an NLIP message.
type send struct {
	sub ingress.Submission
	nmp ingress.NMPReport
}

// parseSend reads an ALP send of snd out of m; pointers name its parts as
// the agent sent them, and the stored header leaves its authentication
// tokens out. headerKey is the Idempotency-Key header, if any. A
// reply to an inbox item (alp.in_reply_to without alp.to) goes to the
// item's sender.
func (a *API) parseSend(ctx context.Context, snd ingress.Sender, m *nlip.Message, headerKey string) (*send, *httpjson.Error) {
	typ := m.MessageType[len(typePrefix):]
	if typ == "" || len(typ) > maxTypeLength || strings.IndexFunc(typ, notTypeRune) >= 0 {
		return nil, pointed(http.StatusBadRequest, "invalid_alp_message", "/messagetype",
			"the ALP message type after %q must be 1 to %d visible ASCII characters, e.g. alp:meeting.request/v1", typePrefix, maxTypeLength)
	}
	replySM, replyAt, isReply := find(m, labelInReplyTo)
	var inReplyTo string
	if isReply {
		s, isText := replySM.Content.Text()
		if !isText || s == "" || len(s) > 64 {
			return nil, pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", replyAt),
				"%s must be the text of the envelope id answered (an inbox item's id)", labelInReplyTo)
		}
		inReplyTo = s
	}
	var to string
	if _, _, named := find(m, labelTo); named || !isReply {
		var aerr *httpjson.Error
		if to, aerr = recipient(m); aerr != nil {
			return nil, aerr
		}
	}
	from, aerr := claimedSender(m)
	if aerr != nil {
		return nil, aerr
	}
	body, aerr := typedBody(m)
	if aerr != nil {
		return nil, aerr
	}
	key, aerr := idempotencyKey(m, headerKey)
	if aerr != nil {
		return nil, aerr
	}
	env := &alpv1.Envelope{To: to, From: from, Type: typ, Body: body, InReplyTo: inReplyTo}

	s := &send{sub: ingress.Submission{Sender: snd, IdempotencyKey: key}}
	if sm, i, ok := find(m, labelNMP); ok {
		raw, isJSON := sm.Content.JSON()
		if !isJSON {
			return nil, pointed(http.StatusBadRequest, "nmp_malformed", fmt.Sprintf("/submessages/%d/content", i),
				"the %q submessage must be structured/json holding an nmp_message object", labelNMP)
		}
		rep, err := a.door.AgentNMP(&s.sub, raw)
		if err != nil {
			e := classify(err)
			e.Pointer = fmt.Sprintf("/submessages/%d/content", i)
			return nil, e
		}
		s.nmp = rep
	}
	if to == "" {
		// Last, once the message is known to be a valid send: the
		// item's sender, read from this person's inbox (so alp.read), where
		// another person's item is not found, like one that does not
		// exist.
		to, _, err := a.s.ReplyTo(ctx, snd, inReplyTo)
		if err != nil {
			e := classify(err)
			var scope *agentauth.Error
			if !errors.As(err, &scope) {
				e.Pointer = fmt.Sprintf("/submessages/%d/content", replyAt)
			}
			return nil, e
		}
		env.To = to
	}
	stripped, _ := m.WithoutAuthenticationTokens()
	envelope.SetNLIP(env, header(stripped))
	s.sub.Envelope = env
	return s, nil
}

// header is the NLIP header of a send: everything the agent said, with
// the typed body moved into the envelope's body instead of kept twice.
func header(m *nlip.Message) *nlipv1.NlipHeader {
	h := nlip.ToHeader(m)
	for i, sm := range h.GetParts().GetSubmessages() {
		if strings.EqualFold(sm.GetLabel(), labelBody) {
			// The index exists: MoveContent cannot fail here.
			_, _ = nlip.MoveContent(h, i, "body")
			break
		}
	}
	return h
}

func notTypeRune(r rune) bool { return r > unicode.MaxASCII || !unicode.IsGraphic(r) || r == ' ' }

// find is the first submessage with label (case-insensitive) and its index.
func find(m *nlip.Message, label string) (nlip.Submessage, int, bool) {
	for i, sm := range m.Submessages {
		if strings.EqualFold(sm.Label, label) {
			return sm, i, true
		}
	}
	return nlip.Submessage{}, -1, false
}

func recipient(m *nlip.Message) (string, *httpjson.Error) {
	sm, i, ok := find(m, labelTo)
	if !ok {
		return "", pointed(http.StatusBadRequest, "invalid_alp_message", "/submessages",
			"name the recipient in a submessage labeled %q (structured/uri \"acct:person@domain\")", labelTo)
	}
	if s, isText := sm.Content.Text(); isText {
		if to, err := ingress.ParseRecipient(s); err == nil {
			return to, nil
		}
	}
	return "", pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
		"the recipient must be an address person@domain (optionally as an acct: URI)")
}

// claimedSender is the sender the message names in alp.from, if any. The
// broker never takes it (the sender is the credential's); ingress refuses
// a message whose alp.from names anyone else (403 sender_mismatch).
func claimedSender(m *nlip.Message) (string, *httpjson.Error) {
	sm, i, ok := find(m, labelFrom)
	if !ok {
		return "", nil
	}
	if s, isText := sm.Content.Text(); isText {
		if from, err := ingress.ParseRecipient(s); err == nil {
			return from, nil
		}
	}
	return "", pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
		"%s, when given, must be the sender's address person@domain (optionally as an acct: URI)", labelFrom)
}

func typedBody(m *nlip.Message) ([]byte, *httpjson.Error) {
	sm, i, ok := find(m, labelBody)
	if !ok {
		return nil, pointed(http.StatusBadRequest, "invalid_alp_message", "/submessages",
			"put the typed body in a submessage labeled %q (structured/json, a JSON object)", labelBody)
	}
	raw, isJSON := sm.Content.JSON()
	if !isJSON || len(raw) == 0 || raw[0] != '{' {
		return nil, pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
			"the typed body must be a JSON object in a structured/json submessage")
	}
	return raw, nil
}

func idempotencyKey(m *nlip.Message, header string) (string, *httpjson.Error) {
	key := ""
	for i, sm := range m.Submessages {
		if !strings.EqualFold(sm.Format, "token") || !strings.EqualFold(sm.Subformat, idempotencySubformat) {
			continue
		}
		s, isText := sm.Content.Text()
		if !isText || key != "" && key != s {
			return "", pointed(http.StatusBadRequest, "invalid_idempotency_key", fmt.Sprintf("/submessages/%d", i),
				"send one idempotency key as the text of one token submessage with subformat %q", idempotencySubformat)
		}
		key = s
	}
	if header != "" {
		if key != "" && key != header {
			return "", newError(http.StatusBadRequest, "invalid_idempotency_key", "the Idempotency-Key header and the idempotency token differ")
		}
		key = header
	}
	if len(key) > maxIdempotencyKey || strings.IndexFunc(key, notTypeRune) >= 0 {
		return "", newError(http.StatusBadRequest, "invalid_idempotency_key",
			"an idempotency key is 1 to %d visible ASCII characters", maxIdempotencyKey)
	}
	return key, nil
}

func pointed(status int, code, pointer, format string, args ...any) *httpjson.Error {
	e := newError(status, code, format, args...)
	e.Pointer = pointer
	return e
}

// exchange handles one decoded NLIP message from an admitted agent and
// returns the reply and its HTTP status. The caller finishes the reply
// (request.reply: the tokens).
func (a *API) exchange(ctx context.Context, snd ingress.Sender, m *nlip.Message, headerKey string) (*nlip.Message, int, *httpjson.Error) {
	if m.IsControl() {
		return a.controlReply(snd), http.StatusOK, nil
	}
	// A message is one request: a send (messagetype alp:<type>), an
	// inbox read (alp.inbox) or an acknowledgement (alp.ack).
	isSend := strings.HasPrefix(strings.ToLower(m.MessageType), typePrefix)
	inboxSM, inboxAt, isInbox := find(m, labelInbox)
	ackSM, ackAt, isAck := find(m, labelAck)
	switch {
	case btoi(isSend)+btoi(isInbox)+btoi(isAck) > 1:
		return nil, 0, pointed(http.StatusBadRequest, "invalid_alp_message", "/submessages",
			"one request per message: a send (messagetype %q<type>), an inbox read (%q) or an acknowledgement (%q)", typePrefix, labelInbox, labelAck)
	case isInbox:
		reply, aerr := a.inboxRequest(ctx, snd, inboxSM, inboxAt)
		return reply, http.StatusOK, aerr
	case isAck:
		reply, aerr := a.ackRequest(ctx, snd, ackSM, ackAt)
		return reply, http.StatusOK, aerr
	case !isSend && !hasALPParts(m):
		// Plain NLIP, what every NLIP client sends first ("hello"):
		// answered as an NLIP end-point answers, with what it is.
		return a.aboutReply(snd), http.StatusOK, nil
	case !isSend:
		return nil, 0, pointed(http.StatusUnprocessableEntity, "not_an_alp_send", "/messagetype",
			"alpd relays typed ALP messages: set messagetype to %q followed by the ALP type (e.g. alp:meeting.request/v1), "+
				"the recipient in %q and the body in %q; read the inbox with a part labeled %q, acknowledge with %q (see docs/nlip.md)",
			typePrefix, labelTo, labelBody, labelInbox, labelAck)
	}
	// Before the message is read further: a credential that may not send
	// hears that first.
	if err := a.door.MaySend(snd); err != nil {
		return nil, 0, classify(err)
	}
	s, aerr := a.parseSend(ctx, snd, m, headerKey)
	if aerr != nil {
		return nil, 0, aerr
	}
	o, err := a.door.Send(ctx, s.sub)
	if err != nil {
		e := classify(err)
		var body *ingress.BodyError
		if errors.As(err, &body) {
			// Where in the NLIP message: the type, or the body (each
			// failure's pointer is into the body).
			e.Pointer = "/messagetype"
			if _, i, ok := find(m, labelBody); ok && body.Code == ingress.CodeInvalidBody {
				e.Pointer = fmt.Sprintf("/submessages/%d/content", i)
			}
		}
		return nil, 0, e
	}
	res := a.result(o)
	res.NMPIgnored, res.NMPConflicts = s.nmp.Ignored, s.nmp.Conflicts
	return res.message(), status(o), nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// hasALPParts reports whether m has a submessage labeled for alpd: then it
// was meant as a request to the broker, not plain NLIP.
func hasALPParts(m *nlip.Message) bool {
	for _, sm := range m.Submessages {
		if ns, _, ok := strings.Cut(sm.Label, "."); ok && strings.EqualFold(ns, labelNamespace) {
			return true
		}
	}
	return false
}

// status is the HTTP status of an outcome: 202 while pending.
func status(o ingress.Outcome) int {
	if o.Decided {
		return http.StatusOK
	}
	return http.StatusAccepted
}

// structured is a structured/json submessage of our own values (maps,
// strings, integers), which always encode; should one not, the part says
// so in text rather than failing the reply.
func structured(label string, v any) nlip.Submessage {
	sm, err := nlip.JSON(v)
	if err != nil {
		return nlip.Text("english", fmt.Sprintf("internal error: %s could not be encoded", label)).WithLabel(label)
	}
	return sm.WithLabel(label)
}
