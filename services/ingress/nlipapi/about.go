package nlipapi

import (
	"github.com/alpd-project/alpd/internal/alp"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// aboutText is what the broker says about itself to an agent that sent
// plain NLIP or a control message: what it is, how to send, how to read
// the inbox and reply. The one place this text lives; docs/nlip.md
// describes the same in full.
func aboutText(tenant, address string) string {
	return "This is alpd, an ALP broker for " + tenant + ": it carries typed messages between people's agents, " +
		"each checked against the rules of the people and organizations involved. Your credential acts for " + address + ".\n\n" +
		"To send, set messagetype to \"" + typePrefix + "<type>\", name the recipient in a submessage labeled \"" + labelTo +
		"\" and put the typed body in one labeled \"" + labelBody + "\", for example:\n" +
		`{"messagetype":"alp:meeting.request/v1","format":"text","subformat":"english","content":"Ask Bo for a meeting",` +
		`"submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:bo@` + tenant + `"},` +
		`{"label":"alp.body","format":"structured","subformat":"json","content":{"subject":"Planning",` +
		`"start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["bo@` + tenant + `"]}}]}` + "\n" +
		"The answer says, field by field, what the rules decided.\n\n" +
		"Messages for your person wait in their inbox, each item in the view your credential's trust class may see. " +
		"Read it (the credential needs scope alp.read) with a message carrying a submessage labeled \"" + labelInbox +
		"\" (structured/json {\"after\": cursor, \"limit\": n, \"include_acked\": false}, or {\"id\": item id} for one item; " +
		"or GET /nlip/inbox and /nlip/inbox/{id}); on the WebSocket (/nlip/ws, /nlip/ws/text) every item you have not " +
		"acknowledged is pushed to you as a message of type \"" + itemMessageType + "\", and new ones as they arrive. " +
		"An item's second line says who sent it: the broker writes it, never the sender. " + inbox.UntrustedNotice + "\n" +
		"Acknowledge items once handled with a submessage labeled \"" + labelAck + "\" (structured/json {\"ids\": [item ids]}, " +
		"or one id as text): they are not offered to you again. Reply with a send whose \"" + labelInReplyTo +
		"\" names the item's id: without \"" + labelTo + "\" it goes to the item's sender.\n\n" +
		"A control message (messagetype \"control\") lists the broker's capabilities; alpd's NLIP documentation (docs/nlip.md) describes them all."
}

// aboutReply answers plain NLIP (a data message that is no ALP request)
// as an NLIP end-point would: 200 and text saying what this is.
func (a *API) aboutReply(snd ingress.Sender) *nlip.Message {
	return nlip.NewMessage(nlip.Text("english", aboutText(snd.Tenant, snd.Address)), a.capabilities())
}

// controlReply answers a control message (ECMA-430 §6.3: a control message
// gets a control reply) with what this endpoint does.
func (a *API) controlReply(snd ingress.Sender) *nlip.Message {
	m := a.aboutReply(snd)
	m.MessageType = nlip.MessageTypeControl
	return m
}

// capabilities is the structured "alp.capabilities" part: what aboutText
// says, for programs.
func (a *API) capabilities() nlip.Submessage {
	return structured("alp.capabilities", map[string]any{
		"send": map[string]any{"messagetype_prefix": typePrefix, "to": labelTo, "body": labelBody, "in_reply_to": labelInReplyTo,
			"from": labelFrom, "nmp": labelNMP},
		"inbox": map[string]any{"request": labelInbox, "ack": labelAck, "scope": alp.ScopeRead,
			"get": a.cfg.PublicURL + "/nlip/inbox", "item": a.cfg.PublicURL + "/nlip/inbox/{id}",
			"item_messagetype": itemMessageType, "item_parts": []string{labelItem, labelSender, labelBody},
			"page_parts": []string{labelItems, labelNext}, "ack_reply": labelAcked,
			"push": []string{"/nlip/ws", "/nlip/ws/text"}, "max_page": inbox.MaxPageSize, "max_ack": inbox.MaxAckBatch},
		"idempotency":  map[string]any{"token_subformat": idempotencySubformat, "http_header": "Idempotency-Key"},
		"encodings":    []string{mediaJSON, mediaCBOR},
		"max_bytes":    a.cfg.Message.MaxMessageBytes,
		"poll":         a.cfg.PublicURL + "/nlip/envelopes/{id}",
		"websocket":    []string{"/nlip/ws", "/nlip/ws/text"},
		"auth_schemes": []string{"Bearer"},
	})
}
