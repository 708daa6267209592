package alpwire

import (
	"crypto"
	"encoding/json"
	"fmt"
	"time"
)

// Agent classes of Envelope.AgentClass.
const (
	AgentCompany  = "company"
	AgentConsumer = "consumer"
)

// Field limits of an envelope.
const (
	MaxAgentIDLen = 128
	MaxTypeLen    = 320 // msgtypes.MaxNameLen
)

// Envelope is what one broker sends another for one message: the sender
// side's cleared result, signed by the sending broker. It holds exactly
// these members; NLIP tokens and NMP trace and trust never cross brokers.
type Envelope struct {
	Wire        string `json:"wire"`
	ID          string `json:"id"`          // UUID, the envelope id (receivers dedupe by it)
	Origin      string `json:"origin"`      // sending broker name
	Destination string `json:"destination"` // the recipient's domain
	From        string `json:"from"`        // sender address
	FromAgent   string `json:"from_agent"`  // opaque agent id
	AgentClass  string `json:"agent_class"` // AgentCompany or AgentConsumer
	To          string `json:"to"`          // recipient address
	Type        string `json:"type"`        // message type name, "<name>/v<N>"
	// Body is a JSON object: as received when parsed (the exact bytes), as
	// given when signing (signed in RFC 8785 form).
	Body      json.RawMessage `json:"body"`
	CreatedTS int64           `json:"created_ts"`
	ExpiresTS int64           `json:"expires_ts"`
	InReplyTo string          `json:"in_reply_to,omitempty"` // envelope id answered
	SenderLog string          `json:"sender_log,omitempty"`  // the sender's ledger origin, for receipts
	// SenderCommitment is the commitment of the sender's ledger entry for
	// the envelope ("sha256:<hex>", salted: it reveals nothing of the
	// message), which the recipient's log records with the envelope so
	// that the two people's exports match (alpctl ledger match).
	SenderCommitment string `json:"sender_commitment,omitempty"`
	// Withheld are the body members (JSON pointers) the sender side kept
	// back: the receiver checks the body against its type with these
	// excused from "required".
	Withheld   []string   `json:"withheld,omitempty"`
	Signatures Signatures `json:"signatures,omitempty"`
}

// SignEnvelope checks e, sets e.Wire and returns the exact bytes to send: e
// in RFC 8785 form signed under CtxEnvelope by broker (which must be
// e.Origin) with keyID ("ed25519:<id>", see KeyID). e.Signatures is ignored.
func SignEnvelope(e *Envelope, broker, keyID string, s crypto.Signer) ([]byte, error) {
	if broker != e.Origin {
		return nil, fmt.Errorf("alpwire: sign envelope: signer %q is not its origin %q", broker, e.Origin)
	}
	c := *e
	c.Wire = Version
	c.Signatures = nil
	raw, err := marshalUnsigned(&c)
	if err != nil {
		return nil, err
	}
	if _, err := parseEnvelope(raw, false); err != nil {
		return nil, fmt.Errorf("alpwire: sign envelope: %w", err)
	}
	out, err := AddSignature(raw, CtxEnvelope, broker, keyID, s)
	if err != nil {
		return nil, err
	}
	e.Wire = Version
	return out, nil
}

// ParseEnvelope reads an envelope under the wire rules (at most
// MaxEnvelopeBytes; every member known, present and valid; at least one
// signature). It does not verify signatures: see VerifyEnvelope.
func ParseEnvelope(raw []byte) (*Envelope, error) {
	e, err := parseEnvelope(raw, true)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// VerifyEnvelope parses raw and checks its signature by its origin broker
// (VerifySigned under CtxEnvelope) for the time at: the receiver's now for
// a new envelope, its created_ts for a stored one.
func VerifyEnvelope(raw []byte, keys KeyResolver, at time.Time) (*Envelope, error) {
	e, err := ParseEnvelope(raw)
	if err != nil {
		return nil, err
	}
	if err := VerifySigned(raw, CtxEnvelope, e.Origin, keys, at); err != nil {
		return nil, err
	}
	return e, nil
}

func parseEnvelope(raw []byte, signed bool) (*Envelope, *Error) {
	obj, err := parseObject(raw, MaxEnvelopeBytes)
	if err != nil {
		return nil, err
	}
	f := readFields(obj, "")
	f.version()
	e := &Envelope{Wire: Version}
	var p string
	e.ID, p = f.str("id", true, 36)
	f.uuid(e.ID, p)
	e.Origin, p = f.str("origin", true, 253)
	f.dnsName(e.Origin, p)
	e.Destination, p = f.str("destination", true, 253)
	f.dnsName(e.Destination, p)
	e.From, p = f.str("from", true, 254)
	f.address(e.From, p)
	e.FromAgent, _ = f.str("from_agent", true, MaxAgentIDLen)
	e.AgentClass, p = f.str("agent_class", true, 0)
	f.oneOf(e.AgentClass, p, AgentCompany, AgentConsumer)
	e.To, p = f.str("to", true, 254)
	f.address(e.To, p)
	e.Type, p = f.str("type", true, MaxTypeLen)
	f.typeName(e.Type, p)
	if b := f.object("body", true); b != nil {
		e.Body = json.RawMessage(append([]byte(nil), raw[b.start:b.end]...))
	}
	e.CreatedTS = f.ts("created_ts")
	e.ExpiresTS = f.ts("expires_ts")
	if f.err == nil && e.ExpiresTS <= e.CreatedTS {
		f.fail(CodeInvalidValue, "/expires_ts", "is not after created_ts")
	}
	e.InReplyTo, p = f.str("in_reply_to", false, 36)
	f.uuid(e.InReplyTo, p)
	e.SenderLog, p = f.str("sender_log", false, 0)
	f.ledgerOrigin(e.SenderLog, p)
	e.SenderCommitment, p = f.str("sender_commitment", false, 80)
	f.commitment(e.SenderCommitment, p)
	e.Withheld = f.pointers("withheld")
	if e.Signatures, err = f.signatures(obj, signed); err != nil {
		return nil, err
	}
	return e, nil
}
