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
	labelInReplyTo = "alp.in_reply_to" // text: the envelope id answered
	labelNMP       = "nmp"             // structured/json: the agent's NMP header (nmp_message)
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

// parseSend reads an ALP send of snd out of m (authentication tokens
// already stripped). headerKey is the Idempotency-Key header, if any.
func (a *API) parseSend(snd ingress.Sender, m *nlip.Message, headerKey string) (*send, *httpjson.Error) {
	typ := m.MessageType[len(typePrefix):]
	if typ == "" || len(typ) > maxTypeLength || strings.IndexFunc(typ, notTypeRune) >= 0 {
		return nil, pointed(http.StatusBadRequest, "invalid_alp_message", "/messagetype",
			"the ALP message type after %q must be 1 to %d visible ASCII characters, e.g. alp:meeting.request/v1", typePrefix, maxTypeLength)
	}
	to, aerr := recipient(m)
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
	env := &alpv1.Envelope{To: to, Type: typ, Body: body}
	if sm, i, ok := find(m, labelInReplyTo); ok {
		s, isText := sm.Content.Text()
		if !isText || s == "" || len(s) > 64 {
			return nil, pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
				"%s must be the text of the envelope id answered", labelInReplyTo)
		}
		env.InReplyTo = s
	}

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
	envelope.SetNLIP(env, header(m))
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
// returns the reply and its HTTP status.
func (a *API) exchange(ctx context.Context, snd ingress.Sender, m *nlip.Message, headerKey string) (*nlip.Message, int, *httpjson.Error) {
	if m.IsControl() {
		return a.controlReply(m), http.StatusOK, nil
	}
	if !strings.HasPrefix(strings.ToLower(m.MessageType), typePrefix) {
		return nil, 0, pointed(http.StatusUnprocessableEntity, "not_an_alp_send", "/messagetype",
			"alpd relays typed ALP messages: set messagetype to %q followed by the ALP type (e.g. alp:meeting.request/v1), "+
				"the recipient in %q and the body in %q (see docs/nlip.md)", typePrefix, labelTo, labelBody)
	}
	// Before the message is read further: a credential that may not send
	// hears that first.
	if err := a.door.MaySend(snd); err != nil {
		return nil, 0, classify(err)
	}
	stripped, _ := m.WithoutAuthenticationTokens()
	s, aerr := a.parseSend(snd, stripped, headerKey)
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
	reply := res.message()
	nlip.EchoTokens(m, reply)
	return reply, status(o), nil
}

// status is the HTTP status of an outcome: 202 while pending.
func status(o ingress.Outcome) int {
	if o.Decided {
		return http.StatusOK
	}
	return http.StatusAccepted
}

// controlReply answers a control message (ECMA-430 §6.3: a control message
// gets a control reply) with what this endpoint does.
func (a *API) controlReply(req *nlip.Message) *nlip.Message {
	m := nlip.NewMessage(nlip.Text("english", "alpd relays typed ALP messages between people's agents. "+
		"Send messagetype \"alp:<type>\" with the recipient in \""+labelTo+"\" and the typed body in \""+labelBody+"\"."))
	m.MessageType = "control"
	m.Add(structured("alp.capabilities", map[string]any{
		"send":         map[string]any{"messagetype_prefix": typePrefix, "to": labelTo, "body": labelBody, "in_reply_to": labelInReplyTo, "nmp": labelNMP},
		"idempotency":  map[string]any{"token_subformat": idempotencySubformat, "http_header": "Idempotency-Key"},
		"encodings":    []string{mediaJSON, mediaCBOR},
		"max_bytes":    a.cfg.Message.MaxMessageBytes,
		"poll":         a.cfg.PublicURL + "/nlip/envelopes/{id}",
		"websocket":    []string{"/nlip/ws", "/nlip/ws/text"},
		"auth_schemes": []string{"Bearer"},
	}))
	nlip.EchoTokens(req, m)
	return m
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
