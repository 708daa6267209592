package restapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/services/ingress"
)

// Bounds of what an agent names.
const (
	maxIdempotencyKey = 255
	maxTypeLength     = 200
)

// sendRequest is POST /v1/agent/messages.
type sendRequest struct {
	To   string          `json:"to"`
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
	// InReplyTo is the envelope id answered (a reply to an inbox item is
	// better sent with POST /v1/agent/inbox/{id}/reply).
	InReplyTo string `json:"in_reply_to,omitempty"`
	// From may be given; it must be the credential's own address. It is
	// never taken as the sender.
	From string `json:"from,omitempty"`
}

// outcomeJSON is what became of a sent envelope.
type outcomeJSON struct {
	EnvelopeID string `json:"envelope_id"`
	Type       string `json:"type,omitempty"`
	To         string `json:"to,omitempty"`
	// Outcome: deliver, deliver_partial, hold, refuse or pending.
	Outcome string       `json:"outcome"`
	Reasons []reasonJSON `json:"reasons,omitempty"`
	Fields  []fieldJSON  `json:"fields,omitempty"`
	// Status is where to read the outcome again (always; poll it while
	// pending).
	Status    string `json:"status"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Delivery: for a recipient at another broker, where it stands.
	Delivery *ingress.Delivery `json:"delivery,omitempty"`
	// Approval: for a recipient here asked to decide part of it, their
	// decisions.
	Approval *ingress.Approval `json:"approval,omitempty"`
}

type reasonJSON struct {
	Party   string `json:"party"`
	Rule    string `json:"rule,omitempty"`
	Field   string `json:"field,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

type fieldJSON struct {
	Pointer string       `json:"pointer"`
	Class   string       `json:"class,omitempty"`
	Action  string       `json:"action"`
	Reasons []reasonJSON `json:"reasons,omitempty"`
}

func reasonsOf(rs []ingress.Reason) []reasonJSON {
	var out []reasonJSON
	for _, r := range rs {
		out = append(out, reasonJSON{Party: r.Party, Rule: r.Rule, Field: r.Field, Code: r.Code, Message: r.Message})
	}
	return out
}

func (a *API) statusURL(id string) string { return a.cfg.PublicURL + PathMessages + "/" + id }

func (a *API) outcome(o ingress.Outcome) outcomeJSON {
	out := outcomeJSON{EnvelopeID: o.EnvelopeID, Type: o.Type, To: o.To, Outcome: o.Outcome,
		Reasons: reasonsOf(o.Reasons), Status: a.statusURL(o.EnvelopeID), Duplicate: o.Duplicate, Delivery: o.Delivery, Approval: o.Approval}
	for _, f := range o.Fields {
		out.Fields = append(out.Fields, fieldJSON{Pointer: f.Pointer, Class: f.Class, Action: f.Action, Reasons: reasonsOf(f.Reasons)})
	}
	return out
}

// writeOutcome answers an outcome: 200 once decided, 202 with Location
// while policy has not decided (poll the status URL).
func (a *API) writeOutcome(w http.ResponseWriter, o ingress.Outcome) {
	status := http.StatusOK
	if !o.Decided {
		status = http.StatusAccepted
		w.Header().Set("Location", a.statusURL(o.EnvelopeID))
	}
	httpjson.Write(w, status, a.outcome(o))
}

// send is POST /v1/agent/messages.
func (a *API) send(w http.ResponseWriter, r *http.Request) {
	var req sendRequest
	snd, key, ok := a.admitSend(w, r, maySend, &req)
	if !ok {
		return
	}
	env, e := envelopeOf(req.To, req.Type, req.Body, "/body")
	if e != nil {
		a.fail(w, r, e)
		return
	}
	if req.InReplyTo != "" {
		id, err := ingress.ParseEnvelopeID(req.InReplyTo)
		if err != nil {
			a.fail(w, r, pointed(http.StatusBadRequest, CodeInvalidRequest, "/in_reply_to", "in_reply_to must be the envelope id answered (a UUID)"))
			return
		}
		env.InReplyTo = id
	}
	// A from other than the credential's is refused by the door
	// (ingress.ErrSenderMismatch) before anything is stored.
	env.From = req.From
	a.submit(w, r, ingress.Submission{Sender: snd, Envelope: env, IdempotencyKey: key}, "/body")
}

// admitSend admits a request that sends: the agent (admit, with the scopes
// need asks for), then its Idempotency-Key and its JSON body decoded into
// req, in that order; false when it was answered.
func (a *API) admitSend(w http.ResponseWriter, r *http.Request, need func(*ingress.Door, ingress.Sender) error, req any) (ingress.Sender, string, bool) {
	snd, ok := a.admit(w, r, need)
	if !ok {
		return ingress.Sender{}, "", false
	}
	key, e := idempotencyKey(r)
	if e == nil {
		e = decode(r, req)
	}
	if e != nil {
		a.fail(w, r, e)
		return ingress.Sender{}, "", false
	}
	return snd, key, true
}

// submit sends sub through the door and answers its outcome. bodyPointer
// is where the typed body sits in the request, for a body the type's
// schema refuses.
func (a *API) submit(w http.ResponseWriter, r *http.Request, sub ingress.Submission, bodyPointer string) {
	o, err := a.door.Send(r.Context(), sub)
	if err != nil {
		e := classify(err)
		var body *ingress.BodyError
		if errors.As(err, &body) {
			e.Pointer = "/type"
			if body.Code == ingress.CodeInvalidBody {
				// The first failure, in the request: every failure's
				// pointer (into the body) is in problems.
				e.Pointer = bodyPointer
				if len(body.Errors) > 0 {
					e.Pointer += body.Errors[0].Pointer
				}
			}
		}
		a.fail(w, r, e)
		return
	}
	a.writeOutcome(w, o)
}

// envelopeOf checks what an agent names and builds the envelope; pointers
// are into the request, with bodyAt the member that holds the body ("" for
// a body flattened into the request).
func envelopeOf(to, typ string, body json.RawMessage, bodyAt string) (*alpv1.Envelope, *httpjson.Error) {
	if to == "" {
		return nil, pointed(http.StatusBadRequest, CodeInvalidRequest, "/to", "name the recipient in to: an address person@domain")
	}
	rcpt, err := ingress.ParseRecipient(to)
	if err != nil {
		return nil, pointed(http.StatusBadRequest, CodeInvalidRequest, "/to", "the recipient must be an address person@domain (optionally as an acct: URI)")
	}
	if typ == "" || len(typ) > maxTypeLength || strings.IndexFunc(typ, notVisible) >= 0 {
		return nil, pointed(http.StatusBadRequest, CodeInvalidRequest, "/type",
			"type must be a message type of 1 to %d visible ASCII characters, e.g. meeting.request/v1", maxTypeLength)
	}
	if len(body) == 0 || body[0] != '{' {
		return nil, pointed(http.StatusBadRequest, CodeInvalidRequest, bodyAt, "body must be the typed body, a JSON object")
	}
	return &alpv1.Envelope{To: rcpt, Type: typ, Body: body}, nil
}

func notVisible(r rune) bool { return r > unicode.MaxASCII || !unicode.IsGraphic(r) || r == ' ' }

// idempotencyKey reads the Idempotency-Key header: the door derives the
// envelope id from it, so a retry is the same envelope.
func idempotencyKey(r *http.Request) (string, *httpjson.Error) {
	vals := r.Header.Values("Idempotency-Key")
	if len(vals) == 0 {
		return "", nil
	}
	key := vals[0]
	if len(vals) > 1 || key == "" || len(key) > maxIdempotencyKey || strings.IndexFunc(key, notVisible) >= 0 {
		return "", httpjson.Errorf(http.StatusBadRequest, CodeInvalidIdempotencyKey,
			"Idempotency-Key is one value of 1 to %d visible ASCII characters", maxIdempotencyKey)
	}
	return key, nil
}

// status is GET /v1/agent/messages/{id}: the outcome of one of the
// person's envelopes.
func (a *API) status(w http.ResponseWriter, r *http.Request) {
	snd, ok := a.admit(w, r, maySendOrRead)
	if !ok {
		return
	}
	// The id names NATS subjects: parsed as the UUID it is before any use.
	id, err := ingress.ParseEnvelopeID(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	o, err := a.door.Status(r.Context(), snd, id)
	if err != nil {
		a.fail(w, r, classify(err))
		return
	}
	out := a.outcome(o)
	httpjson.Write(w, http.StatusOK, out)
}
