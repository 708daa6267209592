package nlipapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	nmpv1 "github.com/alpd-project/alpd/gen/alp/nmp/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/accesstoken"
	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/nmp"
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
	sub     ingress.Submission
	ignored []string // what the broker did not take from the agent's NMP header
	// conflicts the agent's NMP signals show (CONFLICT, INCONSISTENCY,
	// RISK): reported back, not refused.
	conflicts []string
}

// parseSend reads an ALP send out of m (authentication tokens already
// stripped). headerKey is the Idempotency-Key header, if any.
func (a *API) parseSend(p agentauth.Principal, m *nlip.Message, headerKey string) (*send, *apiError) {
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

	trust, reason := sendersTrust(p)
	snd := &send{sub: ingress.Submission{
		Sender: ingress.Sender{Tenant: p.Tenant, PersonID: p.PersonID, Address: p.Address, AgentID: p.AgentID,
			Trust: trust, TrustReason: reason},
		IdempotencyKey: key,
	}}
	if sm, i, ok := find(m, labelNMP); ok {
		raw, isJSON := sm.Content.JSON()
		if !isJSON {
			return nil, pointed(http.StatusBadRequest, "nmp_malformed", fmt.Sprintf("/submessages/%d/content", i),
				"the %q submessage must be structured/json holding an nmp_message object", labelNMP)
		}
		agent, err := nmp.ParseAgentHeader(raw, a.cfg.NMP.Limits)
		if err != nil {
			e := classify(err)
			e.Pointer = fmt.Sprintf("/submessages/%d/content", i)
			return nil, e
		}
		// Ingress merges the header after its own hop (Accept); merging it
		// here on the credential's trust gives the same budget, signals and
		// ignored parts, which the agent must hear about before anything is
		// stored.
		hdr, ignored := nmp.Apply(&nmpv1.NmpHeader{Trust: trust}, agent, a.cfg.NMP)
		for _, ig := range ignored {
			snd.ignored = append(snd.ignored, ig.String())
		}
		if nmp.Halted(hdr.GetBudget(), a.cfg.NMP.Halt) {
			return nil, pointed(http.StatusUnprocessableEntity, "nmp_budget_halted", fmt.Sprintf("/submessages/%d/content", i),
				"the NMP budget is spent: tokens_used %d of max_tokens %d is at or over the halt threshold (%d%%)",
				hdr.GetBudget().GetTokensUsed(), hdr.GetBudget().GetMaxTokens(), a.cfg.NMP.Halt.Percent)
		}
		for _, c := range nmp.Detect(hdr.GetSignals(), a.cfg.NMP.Rules) {
			snd.conflicts = append(snd.conflicts, string(c.Kind)+": "+c.Message)
		}
		if hdr.GetTrust() < trust {
			snd.sub.TrustCap, snd.sub.TrustCapReason = agent.TrustCap()
		}
		snd.sub.AgentNMP, snd.sub.NMP = agent, a.cfg.NMP
	}
	envelope.SetNLIP(env, header(m))
	snd.sub.Envelope = env
	return snd, nil
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

// sendersTrust is the NMP trust the credential earns: company agents are
// trusted (3), consumer agents verified (2) — docs/identity.md.
func sendersTrust(p agentauth.Principal) (nmpv1.TrustLevel, string) {
	if p.Class == accesstoken.ClassCompany {
		return nmpv1.TrustLevel_TRUST_LEVEL_TRUSTED, "company agent credential (" + p.Credential + ")"
	}
	return nmpv1.TrustLevel_TRUST_LEVEL_VERIFIED, "consumer agent credential (" + p.Credential + ")"
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

func recipient(m *nlip.Message) (string, *apiError) {
	sm, i, ok := find(m, labelTo)
	if !ok {
		return "", pointed(http.StatusBadRequest, "invalid_alp_message", "/submessages",
			"name the recipient in a submessage labeled %q (structured/uri \"acct:person@domain\")", labelTo)
	}
	s, isText := sm.Content.Text()
	addr, err := alp.ParseAddress(strings.TrimSpace(s))
	if !isText || err != nil {
		return "", pointed(http.StatusBadRequest, "invalid_alp_message", fmt.Sprintf("/submessages/%d/content", i),
			"the recipient must be an address person@domain (optionally as an acct: URI)")
	}
	return addr.String(), nil
}

func typedBody(m *nlip.Message) ([]byte, *apiError) {
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

func idempotencyKey(m *nlip.Message, header string) (string, *apiError) {
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

func pointed(status int, code, pointer, format string, args ...any) *apiError {
	e := newError(status, code, format, args...)
	e.Pointer = pointer
	return e
}

// exchange handles one decoded NLIP message from an authenticated agent and
// returns the reply and its HTTP status.
func (a *API) exchange(ctx context.Context, p agentauth.Principal, m *nlip.Message, headerKey string) (*nlip.Message, int, *apiError) {
	if m.IsControl() {
		return a.controlReply(m), http.StatusOK, nil
	}
	if !strings.HasPrefix(strings.ToLower(m.MessageType), typePrefix) {
		return nil, 0, pointed(http.StatusUnprocessableEntity, "not_an_alp_send", "/messagetype",
			"alpd relays typed ALP messages: set messagetype to %q followed by the ALP type (e.g. alp:meeting.request/v1), "+
				"the recipient in %q and the body in %q (see docs/nlip.md)", typePrefix, labelTo, labelBody)
	}
	if !slices.Contains(p.Scopes, alp.ScopeSend) {
		return nil, 0, &apiError{Status: http.StatusForbidden, Code: accesstoken.CodeInsufficientScope,
			Message:   "the credential does not allow sending (scope " + alp.ScopeSend + ")",
			Challenge: (&accesstoken.Error{Code: accesstoken.CodeInsufficientScope, Scope: alp.ScopeSend}).WWWAuthenticate(a.backend.Authenticator().ResourceMetadataURL)}
	}
	stripped, _ := m.WithoutAuthenticationTokens()
	snd, aerr := a.parseSend(p, stripped, headerKey)
	if aerr != nil {
		return nil, 0, aerr
	}
	id, err := a.backend.EnvelopeID(ctx, snd.sub.Sender, snd.sub.IdempotencyKey)
	if err != nil {
		return nil, 0, classify(err)
	}
	snd.sub.EnvelopeID = id
	w, err := a.backend.Await(p.Tenant, p.PersonID, id)
	if err != nil {
		return nil, 0, classify(err)
	}
	defer w.Close()
	acc, err := a.backend.Accept(ctx, snd.sub)
	if err != nil {
		return nil, 0, classify(err)
	}
	wctx, cancel := context.WithTimeout(ctx, a.cfg.DecisionWait)
	defer cancel()
	d, err := w.Wait(wctx, acc.Duplicate)
	if err != nil {
		a.log.Warn("waiting for a decision failed", "envelope", acc.EnvelopeID, "err", err)
	}
	res := a.result(acc.EnvelopeID, snd.sub.Envelope, d)
	res.Duplicate, res.NMPIgnored, res.NMPConflicts = acc.Duplicate, snd.ignored, snd.conflicts
	reply := res.message()
	nlip.EchoTokens(m, reply)
	status := http.StatusOK
	if d == nil {
		status = http.StatusAccepted
	}
	return reply, status, nil
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
