package ledgerlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"
)

// EntryVersion is the version of the leaf format ("v").
const EntryVersion = 1

// Entry kinds. A verifier refuses kinds it does not know rather than
// guessing what an unknown statement means; adding a kind is a change to
// this list (KnownKind) and to docs/ledger.md.
const (
	// KindSendRequested: the person's agent asked to send an envelope.
	KindSendRequested = "envelope.send_requested"
	// KindReceived: an envelope from a counterparty was received for the
	// person. From a sender on the same broker it carries the sender's own
	// commitment (the very string of the sender's envelope entry), with no
	// opening in the recipient's log: the recipient has no claim to a
	// digest of fields the sender side may have withheld from them, and the
	// equal commitments tie the two leaves together (Match).
	KindReceived = "envelope.received"
	// KindDecided: policy's sender-side decision on an envelope the person
	// sent: the outcome, every field's verdict and why, as the sender may
	// see it (another party's policy ids withheld).
	KindDecided = "policy.decided"
	// KindDeliverable: policy's recipient-side decision on an envelope for
	// the person: every field's verdict, which trust class of the person's
	// agents sees which fields, and what is held for the person.
	KindDeliverable = "policy.deliverable"
	// KindReceiptIssued: this broker issued a receipt to the counterparty
	// for an envelope (the receipt may be embedded).
	KindReceiptIssued = "receipt.issued"
	// KindReceiptReceived: the counterparty's receipt for an envelope,
	// embedded, so the ledger holds a pointer into the other ledger.
	KindReceiptReceived = "receipt.received"
	// KindInboxDelivered: one of the person's agents acknowledged an inbox
	// item, so the envelope was delivered to it in the view of its trust
	// class: the agent (its opaque id), the class, the pointers of the
	// fields its view left out and the held items it was told about.
	KindInboxDelivered = "inbox.delivered"
	// KindFederationAccepted: the recipient's broker (another one) took
	// the envelope the person sent (its signed Accepted): it left this
	// broker, and that broker now owes a receipt.
	KindFederationAccepted = "federation.accepted"
	// KindFederationFailed: the envelope the person sent could not be
	// delivered to the recipient's broker: it refused it, or it could not
	// be reached before the outbox gave up (the code says which).
	KindFederationFailed = "federation.failed"
	// KindCheckpointCosigned: a counterparty's witness cosigned one of the
	// log's checkpoints (C2SP tlog-cosignature): the checkpoint as this
	// log signed it and the cosigner's signature line. It names no envelope.
	KindCheckpointCosigned = "checkpoint.cosigned"
	// KindApprovalRequested: something waits for the person's decision
	// (approvals): the item, its held kind, the envelope, the digest of
	// the held payload a decision is bound to, the binding code the
	// sending agent shows and when it expires — never the held values.
	KindApprovalRequested = "approval.requested"
	// KindApprovalDecision: the person's decision on an item (or its
	// expiry, supersession, cancellation): the state, the digest it was
	// bound to and the standing rule an "approve always" created.
	KindApprovalDecision = "approval.decision"
	// KindRuleCreated: the person's standing rule ("approve always"):
	// what it covers (message type, counterparty, commit action) and until
	// when. It names no envelope.
	KindRuleCreated = "rule.created"
	// KindRuleRevoked: the person revoked a standing rule. It names no
	// envelope.
	KindRuleRevoked = "rule.revoked"
)

// Approval states ("state" of an approval.decision), as approvals names
// them.
const (
	StateApprovedOnce   = "approved_once"
	StateApprovedAlways = "approved_always"
	StateDenied         = "denied"
	StateExpired        = "expired"
	StateSuperseded     = "superseded"
	StateCancelled      = "cancelled"
)

// IsApprovalKind reports whether kind records the person's approvals (an
// item, a decision, a standing rule).
func IsApprovalKind(kind string) bool {
	switch kind {
	case KindApprovalRequested, KindApprovalDecision, KindRuleCreated, KindRuleRevoked:
		return true
	}
	return false
}

// KnownKind reports whether kind is an entry kind this version understands.
func KnownKind(kind string) bool {
	switch kind {
	case KindSendRequested, KindReceived, KindDecided, KindDeliverable, KindReceiptIssued, KindReceiptReceived, KindInboxDelivered,
		KindFederationAccepted, KindFederationFailed, KindCheckpointCosigned,
		KindApprovalRequested, KindApprovalDecision, KindRuleCreated, KindRuleRevoked:
		return true
	}
	return false
}

// IsEnvelopeKind reports whether kind records the envelope itself (sent or
// received, with a commitment to its digest): the entry a receipt proves
// and a match of two ledgers pairs.
func IsEnvelopeKind(kind string) bool {
	return kind == KindSendRequested || kind == KindReceived
}

// IsDecisionKind reports whether kind records a policy decision about an
// envelope (its outcome and per-field verdicts) rather than the envelope.
func IsDecisionKind(kind string) bool {
	return kind == KindDecided || kind == KindDeliverable
}

// IsReceiptKind reports whether kind records a receipt rather than the
// envelope itself.
func IsReceiptKind(kind string) bool {
	return kind == KindReceiptIssued || kind == KindReceiptReceived
}

// Limits on a leaf. They keep a hostile export from making a verifier
// allocate without bound, and they are far above what a real entry needs.
const (
	// MaxLeafBytes bounds one canonical leaf.
	MaxLeafBytes = 64 << 10
	// MaxIndex is the largest leaf index: JSON numbers are IEEE doubles
	// under RFC 8785, exact only up to 2^53-1.
	MaxIndex     = 1<<53 - 1
	maxFields    = 1024
	maxStringLen = 512
	// maxList bounds every other list of an entry (reasons, rule versions,
	// held items, views, a held item's or view's pointers beyond
	// maxFields).
	maxList = 64
)

// Outcomes of a decision entry ("outcome"), as policy names them.
const (
	OutcomeDeliver        = "deliver"
	OutcomeDeliverPartial = "deliver_partial"
	OutcomeHold           = "hold"
	OutcomeRefuse         = "refuse"
)

// Actions of a field verdict ("action").
const (
	ActionAllow = "allow"
	ActionDeny  = "deny"
	ActionHold  = "hold"
)

// Kinds of a held item ("kind" of an element of "held").
const (
	HeldConnectionRequest  = "connection_request"
	HeldCommitment         = "commitment"
	HeldConfidentialFields = "confidential_fields"
)

// Trust classes of a person's agents ("trust_class" of a view or a
// delivery), as policy and identity name them.
const (
	TrustClassCompany  = "company"
	TrustClassConsumer = "consumer"
)

// TimeLayout is the one accepted form of "ts": RFC 3339, UTC, milliseconds.
// A single form keeps the leaf canonical beyond what RFC 8785 covers.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// FormatTime renders t in TimeLayout (UTC, truncated to milliseconds).
func FormatTime(t time.Time) string { return t.UTC().Truncate(time.Millisecond).Format(TimeLayout) }

// FieldVerdict is the decision about one field of an envelope: what
// happens to it and why. It names the field (its JSON pointer and class),
// never its value.
type FieldVerdict struct {
	// Pointer is the RFC 6901 pointer of the field in the body.
	Pointer string `json:"pointer"`
	Class   string `json:"class,omitempty"`
	// Action is ActionAllow, ActionDeny or ActionHold.
	Action string `json:"action"`
	// Reasons are every party's refusal (or hold) of the field.
	Reasons []Reason `json:"reasons,omitempty"`
}

// Reason is why a party refused or held something: the party, its policy
// id (absent where the party's ids are not the person's to see) and the
// public reason code. Never the rule's text.
type Reason struct {
	// Party is "sender", "sender_org", "recipient_org", "recipient" or
	// "broker" (the hard rules).
	Party  string `json:"party"`
	Policy string `json:"policy,omitempty"`
	Code   string `json:"code,omitempty"`
	// Pointer, on a reason about the whole message, is the field it names
	// (a body that fails its schema at a place); absent otherwise.
	Pointer string `json:"pointer,omitempty"`
}

// HeldItem is one thing policy held for the recipient person to decide:
// its id, kind, the fields it holds and what it commits — never the
// sealed fields themselves.
type HeldItem struct {
	ID       string   `json:"id"`
	Kind     string   `json:"kind"`
	Pointers []string `json:"pointers,omitempty"`
	Commits  string   `json:"commits,omitempty"`
}

// View is which fields one trust class of the recipient's agents is given.
type View struct {
	TrustClass string   `json:"trust_class"`
	Pointers   []string `json:"pointers,omitempty"`
}

// Entry is one ledger leaf. Its canonical JSON (Canonical) is what is
// hashed into the tree; the Go value is only a convenient view of it.
type Entry struct {
	V int `json:"v"`
	// Log is the origin of the log holding the entry; binding it into the
	// leaf stops a leaf from being replayed into another person's log.
	Log string `json:"log"`
	// Index is the leaf's position; binding it makes reordering evident
	// even to someone who only reads leaves.
	Index uint64 `json:"i"`
	Kind  string `json:"kind"`
	// SourceEvent is the id of the bus event the entry was derived from, so
	// an operator can trace a leaf to its cause.
	SourceEvent string `json:"source_event"`
	EnvelopeID  string `json:"envelope_id,omitempty"`
	// Commitment is Commit(salt, EnvelopeDigest(...)), or empty if the
	// envelope was erased before it was recorded.
	Commitment string `json:"commitment,omitempty"`
	// Counterparty is the other side's ledger origin when known, else its
	// domain — never an address: a leaf can never be erased, and an address
	// is personal data. Match uses it (with receipts) to decide which
	// envelopes must appear in the other ledger.
	Counterparty string `json:"counterparty,omitempty"`
	// Outcome, Reasons (about the whole message), Fields, RuleVersions
	// ("party:owner:version" of each rule set used), Held and Views are
	// a decision's (IsDecisionKind); Held and Views a deliverable's only.
	Outcome      string         `json:"outcome,omitempty"`
	Reasons      []Reason       `json:"reasons,omitempty"`
	Fields       []FieldVerdict `json:"fields,omitempty"`
	RuleVersions []string       `json:"rule_versions,omitempty"`
	Held         []HeldItem     `json:"held,omitempty"`
	Views        []View         `json:"views,omitempty"`
	// Agent (the agent's opaque id), TrustClass, Withheld (pointers of
	// the fields policy let through that the agent's view left out) and
	// HeldIDs (the held items the agent was told about) are a delivery's
	// (KindInboxDelivered) only, and required there but for the lists.
	Agent      string   `json:"agent,omitempty"`
	TrustClass string   `json:"trust_class,omitempty"`
	Withheld   []string `json:"withheld,omitempty"`
	HeldIDs    []string `json:"held_ids,omitempty"`
	// Broker (the remote broker's name) and Code (the failure's stable
	// code) are federation's outcomes' (KindFederationAccepted: broker;
	// KindFederationFailed: code, broker when known).
	Broker string `json:"broker,omitempty"`
	Code   string `json:"code,omitempty"`
	// OriginSignature ("<broker> <key id> <signature>") and WireDigest
	// (base64url SHA-256 of the exact bytes that broker signed) are an
	// envelope.received's from another broker: the receiver keeps the
	// sender's broker's signature on its own log, checkable against the
	// envelope's bytes and that broker's published keys.
	OriginSignature string `json:"origin_signature,omitempty"`
	WireDigest      string `json:"wire_sha256,omitempty"`
	// Checkpoint (a signed checkpoint of this log, the exact note) and
	// Cosignature (the cosigner's signature line, without its newline) are
	// a KindCheckpointCosigned's, and required there.
	Checkpoint  string `json:"checkpoint,omitempty"`
	Cosignature string `json:"cosignature,omitempty"`
	// Item (the approval item's id), HeldKind (its kind, as in "held"),
	// PayloadDigest (hex SHA-256 of the held payload, the envelope id and
	// the kind), BindingCode and Expires (TimeLayout) are an
	// approval.requested's; Item, State, PayloadDigest and Rule (the
	// standing rule an approved_always created) an approval.decision's;
	// Rule, Type (the message type), Counterparty (its domain), Action
	// (the x-alp-commits word) and Expires a rule.created's; Rule a
	// rule.revoked's.
	Item          string `json:"item,omitempty"`
	HeldKind      string `json:"held_kind,omitempty"`
	PayloadDigest string `json:"payload_digest,omitempty"`
	BindingCode   string `json:"binding_code,omitempty"`
	Expires       string `json:"expires,omitempty"`
	State         string `json:"state,omitempty"`
	Rule          string `json:"rule,omitempty"`
	Type          string `json:"type,omitempty"`
	Action        string `json:"action,omitempty"`
	// Time is when the broker recorded the entry, in TimeLayout.
	Time string `json:"ts"`
	// Receipt is the counterparty's receipt (KindReceiptReceived, required)
	// or the one this broker issued (KindReceiptIssued, optional).
	Receipt *Receipt `json:"receipt,omitempty"`
}

// Validate checks the entry's own rules (not its place in a log).
func (e Entry) Validate() error {
	if e.V != EntryVersion {
		return fmt.Errorf("version %d, want %d", e.V, EntryVersion)
	}
	if _, _, err := ParseOrigin(e.Log); err != nil {
		return fmt.Errorf("log: %w", err)
	}
	if e.Index > MaxIndex {
		return fmt.Errorf("index %d above %d", e.Index, uint64(MaxIndex))
	}
	if !KnownKind(e.Kind) {
		return fmt.Errorf("unknown kind %s", quote(e.Kind))
	}
	if err := checkText("source_event", e.SourceEvent, true); err != nil {
		return err
	}
	if err := checkText("envelope_id", e.EnvelopeID, e.Kind != KindCheckpointCosigned && e.Kind != KindRuleCreated && e.Kind != KindRuleRevoked); err != nil {
		return err
	}
	if err := checkText("counterparty", e.Counterparty, false); err != nil {
		return err
	}
	if e.Commitment != "" {
		if err := checkCommitment(e.Commitment); err != nil {
			return err
		}
	}
	if err := e.validateDecision(); err != nil {
		return err
	}
	if err := e.validateDelivery(); err != nil {
		return err
	}
	if err := e.validateFederation(); err != nil {
		return err
	}
	if err := e.validateCosigned(); err != nil {
		return err
	}
	if err := e.validateApproval(); err != nil {
		return err
	}
	if t, err := time.Parse(TimeLayout, e.Time); err != nil || t.Format(TimeLayout) != e.Time {
		return fmt.Errorf("ts %s is not %s (UTC, milliseconds)", quote(e.Time), TimeLayout)
	}
	switch {
	case e.Kind == KindReceiptReceived && e.Receipt == nil:
		return fmt.Errorf("%s without a receipt", e.Kind)
	case !IsReceiptKind(e.Kind) && e.Receipt != nil:
		return fmt.Errorf("%s carries a receipt", e.Kind)
	}
	if e.Receipt != nil {
		if err := e.Receipt.validate(); err != nil {
			return fmt.Errorf("receipt: %w", err)
		}
		if e.Receipt.EnvelopeID != e.EnvelopeID {
			return fmt.Errorf("receipt is for envelope %s, entry for %s", quote(e.Receipt.EnvelopeID), quote(e.EnvelopeID))
		}
	}
	return nil
}

// validateDecision checks the members only decisions carry: present on
// decision kinds (an outcome always), absent on the others, and a
// decision holds no commitment or receipt of its own.
func (e Entry) validateDecision() error {
	if !IsDecisionKind(e.Kind) {
		if e.Outcome != "" || len(e.Reasons) > 0 || len(e.Fields) > 0 || len(e.RuleVersions) > 0 || len(e.Held) > 0 || len(e.Views) > 0 {
			return fmt.Errorf("%s carries a decision (outcome, reasons, fields, rule versions, held or views)", e.Kind)
		}
		return nil
	}
	switch e.Outcome {
	case OutcomeDeliver, OutcomeDeliverPartial, OutcomeHold, OutcomeRefuse:
	default:
		return fmt.Errorf("outcome %s is not deliver, deliver_partial, hold or refuse", quote(e.Outcome))
	}
	switch {
	case e.Commitment != "":
		return fmt.Errorf("%s carries a commitment (the envelope's entry does)", e.Kind)
	case e.Kind != KindDeliverable && (len(e.Held) > 0 || len(e.Views) > 0):
		return fmt.Errorf("%s carries held items or views (a deliverable's)", e.Kind)
	case len(e.Fields) > maxFields:
		return fmt.Errorf("%d fields, at most %d", len(e.Fields), maxFields)
	}
	for _, l := range []struct {
		name string
		n    int
	}{{"reasons", len(e.Reasons)}, {"rule versions", len(e.RuleVersions)}, {"held items", len(e.Held)}, {"views", len(e.Views)}} {
		if l.n > maxList {
			return fmt.Errorf("%d %s, at most %d", l.n, l.name, maxList)
		}
	}
	if err := checkReasons("reason", e.Reasons); err != nil {
		return err
	}
	for i, f := range e.Fields {
		if err := checkText("pointer", f.Pointer, false); err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
		if err := checkText("class", f.Class, false); err != nil {
			return fmt.Errorf("field %d: %w", i, err)
		}
		switch f.Action {
		case ActionAllow, ActionDeny, ActionHold:
		default:
			return fmt.Errorf("field %d: action %s is not allow, deny or hold", i, quote(f.Action))
		}
		if len(f.Reasons) > maxList {
			return fmt.Errorf("field %d: %d reasons, at most %d", i, len(f.Reasons), maxList)
		}
		if err := checkReasons(fmt.Sprintf("field %d: reason", i), f.Reasons); err != nil {
			return err
		}
	}
	for i, v := range e.RuleVersions {
		if err := checkText("rule version", v, true); err != nil {
			return fmt.Errorf("rule version %d: %w", i, err)
		}
	}
	for i, h := range e.Held {
		if err := checkText("held id", h.ID, true); err != nil {
			return fmt.Errorf("held item %d: %w", i, err)
		}
		switch h.Kind {
		case HeldConnectionRequest, HeldCommitment, HeldConfidentialFields:
		default:
			return fmt.Errorf("held item %d: kind %s is not connection_request, commitment or confidential_fields", i, quote(h.Kind))
		}
		if err := checkText("commits", h.Commits, false); err != nil {
			return fmt.Errorf("held item %d: %w", i, err)
		}
		if err := checkPointers(fmt.Sprintf("held item %d", i), h.Pointers); err != nil {
			return err
		}
	}
	for i, v := range e.Views {
		if err := checkText("trust class", v.TrustClass, true); err != nil {
			return fmt.Errorf("view %d: %w", i, err)
		}
		if err := checkPointers(fmt.Sprintf("view %d", i), v.Pointers); err != nil {
			return err
		}
	}
	return nil
}

// validateDelivery checks the members only a delivery carries: agent and
// trust class present on it, absent elsewhere; a delivery records no
// commitment (the envelope's entry does).
func (e Entry) validateDelivery() error {
	if e.Kind != KindInboxDelivered {
		if e.Agent != "" || e.TrustClass != "" || len(e.Withheld) > 0 || len(e.HeldIDs) > 0 {
			return fmt.Errorf("%s carries a delivery (agent, trust class, withheld or held ids)", e.Kind)
		}
		return nil
	}
	if e.Commitment != "" {
		return fmt.Errorf("%s carries a commitment (the envelope's entry does)", e.Kind)
	}
	if err := checkText("agent", e.Agent, true); err != nil {
		return err
	}
	if err := checkText("trust class", e.TrustClass, true); err != nil {
		return err
	}
	if err := checkPointers("withheld", e.Withheld); err != nil {
		return err
	}
	if len(e.HeldIDs) > maxList {
		return fmt.Errorf("%d held ids, at most %d", len(e.HeldIDs), maxList)
	}
	for i, id := range e.HeldIDs {
		if err := checkText("held id", id, true); err != nil {
			return fmt.Errorf("held id %d: %w", i, err)
		}
	}
	return nil
}

// validateFederation checks the members only federation's outcomes carry,
// and the origin signature only an envelope.received may.
func (e Entry) validateFederation() error {
	if e.Kind != KindReceived && (e.OriginSignature != "" || e.WireDigest != "") {
		return fmt.Errorf("%s carries an origin signature", e.Kind)
	}
	if err := checkText("origin signature", e.OriginSignature, false); err != nil {
		return err
	}
	if err := checkText("wire digest", e.WireDigest, e.OriginSignature != ""); err != nil {
		return err
	}
	switch e.Kind {
	case KindFederationAccepted, KindFederationFailed:
	default:
		if e.Broker != "" || e.Code != "" {
			return fmt.Errorf("%s carries a federation outcome (broker or code)", e.Kind)
		}
		return nil
	}
	if e.Commitment != "" {
		return fmt.Errorf("%s carries a commitment (the envelope's entry does)", e.Kind)
	}
	if err := checkText("broker", e.Broker, e.Kind == KindFederationAccepted); err != nil {
		return err
	}
	if e.Kind == KindFederationAccepted && e.Code != "" {
		return fmt.Errorf("%s carries a code", e.Kind)
	}
	return checkText("code", e.Code, e.Kind == KindFederationFailed)
}

// validateCosigned checks a cosignature entry: a checkpoint of this very
// log, a well-formed cosignature line, no envelope; and that no other
// kind carries them.
func (e Entry) validateCosigned() error {
	if e.Kind != KindCheckpointCosigned {
		if e.Checkpoint != "" || e.Cosignature != "" {
			return fmt.Errorf("%s carries a checkpoint or cosignature", e.Kind)
		}
		return nil
	}
	switch {
	case e.EnvelopeID != "":
		return fmt.Errorf("%s names an envelope", e.Kind)
	case e.Commitment != "":
		return fmt.Errorf("%s carries a commitment", e.Kind)
	case len(e.Checkpoint) > MaxCheckpointBytes:
		return fmt.Errorf("checkpoint of %d bytes, at most %d", len(e.Checkpoint), MaxCheckpointBytes)
	}
	if err := checkString("checkpoint", e.Checkpoint); err != nil {
		return err
	}
	c, err := CheckpointText([]byte(e.Checkpoint))
	if err != nil {
		return fmt.Errorf("checkpoint: %w", trimPrefix(err))
	}
	if c.Origin != e.Log {
		return fmt.Errorf("checkpoint of %s in the log %s", quote(c.Origin), e.Log)
	}
	if err := checkText("cosignature", e.Cosignature, true); err != nil {
		return err
	}
	if _, err := ParseCosignature(e.Cosignature); err != nil {
		return trimPrefix(err)
	}
	return nil
}

// validateApproval checks the members only approvals' entries carry:
// each kind's required ones present, the others absent; none of them
// records a commitment, and only approval entries name an item or rule.
func (e Entry) validateApproval() error {
	type member struct {
		name, v string
	}
	all := []member{{"item", e.Item}, {"held_kind", e.HeldKind}, {"payload_digest", e.PayloadDigest}, {"binding_code", e.BindingCode},
		{"expires", e.Expires}, {"state", e.State}, {"rule", e.Rule}, {"type", e.Type}, {"action", e.Action}}
	// required and optional members of each kind; anything else is absent.
	var required, optional []string
	switch e.Kind {
	case KindApprovalRequested:
		required, optional = []string{"item", "held_kind", "payload_digest"}, []string{"binding_code", "expires"}
	case KindApprovalDecision:
		required, optional = []string{"item", "state"}, []string{"held_kind", "payload_digest", "rule"}
	case KindRuleCreated:
		required, optional = []string{"rule", "type", "action"}, []string{"expires"}
	case KindRuleRevoked:
		required = []string{"rule"}
	}
	for _, m := range all {
		req, opt := slices.Contains(required, m.name), slices.Contains(optional, m.name)
		if !req && !opt {
			if m.v != "" {
				return fmt.Errorf("%s carries %s (an approval's)", e.Kind, m.name)
			}
			continue
		}
		if err := checkText(m.name, m.v, req); err != nil {
			return err
		}
	}
	if !IsApprovalKind(e.Kind) {
		return nil
	}
	if e.Commitment != "" {
		return fmt.Errorf("%s carries a commitment (the envelope's entry does)", e.Kind)
	}
	if (e.Kind == KindRuleCreated || e.Kind == KindRuleRevoked) && e.EnvelopeID != "" {
		return fmt.Errorf("%s names an envelope", e.Kind)
	}
	if e.HeldKind != "" {
		switch e.HeldKind {
		case HeldConnectionRequest, HeldCommitment, HeldConfidentialFields:
		default:
			return fmt.Errorf("held_kind %s is not connection_request, commitment or confidential_fields", quote(e.HeldKind))
		}
	}
	if e.State != "" {
		switch e.State {
		case StateApprovedOnce, StateApprovedAlways, StateDenied, StateExpired, StateSuperseded, StateCancelled:
		default:
			return fmt.Errorf("state %s is not approved_once, approved_always, denied, expired, superseded or cancelled", quote(e.State))
		}
	}
	if e.Expires != "" {
		if t, err := time.Parse(TimeLayout, e.Expires); err != nil || t.Format(TimeLayout) != e.Expires {
			return fmt.Errorf("expires %s is not %s (UTC, milliseconds)", quote(e.Expires), TimeLayout)
		}
	}
	return nil
}

func checkReasons(what string, rs []Reason) error {
	for i, r := range rs {
		if err := checkText("party", r.Party, true); err != nil {
			return fmt.Errorf("%s %d: %w", what, i, err)
		}
		for _, v := range []string{r.Policy, r.Code, r.Pointer} {
			if err := checkText("reason attribute", v, false); err != nil {
				return fmt.Errorf("%s %d: %w", what, i, err)
			}
		}
	}
	return nil
}

func checkPointers(what string, ps []string) error {
	if len(ps) > maxFields {
		return fmt.Errorf("%s: %d pointers, at most %d", what, len(ps), maxFields)
	}
	for j, p := range ps {
		if err := checkText("pointer", p, false); err != nil {
			return fmt.Errorf("%s: pointer %d: %w", what, j, err)
		}
	}
	return nil
}

// checkText bounds a string field and keeps control characters out of it
// (they would reach terminals through reports).
func checkText(name, v string, required bool) error {
	if v == "" {
		if required {
			return fmt.Errorf("%s is empty", name)
		}
		return nil
	}
	if len(v) > maxStringLen {
		return fmt.Errorf("%s of %d bytes, at most %d", name, len(v), maxStringLen)
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("%s %s has invalid or control characters", name, quote(v))
	}
	return nil
}

// checkString refuses strings the canonical encoder must not see: invalid
// UTF-8 (encoders disagree on how to repair it).
func checkString(name, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s is not valid UTF-8", name)
	}
	return nil
}

// Canonical validates the entry and returns its RFC 8785 bytes: the leaf.
func (e Entry) Canonical() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("ledgerlog: entry %d: %w", e.Index, err)
	}
	leaf := e.appendCanonical(make([]byte, 0, 512))
	if len(leaf) > MaxLeafBytes {
		return nil, fmt.Errorf("ledgerlog: entry %d: %d bytes, at most %d", e.Index, len(leaf), MaxLeafBytes)
	}
	return leaf, nil
}

// ParseEntry parses a leaf strictly: known fields only, valid, and exactly
// canonical — the leaf must equal the canonical form of what it parses to.
// Anything else would let two byte strings (two leaf hashes) stand for the
// same statement.
func ParseEntry(leaf []byte) (Entry, error) {
	if len(leaf) > MaxLeafBytes {
		return Entry{}, fmt.Errorf("ledgerlog: leaf of %d bytes, at most %d", len(leaf), MaxLeafBytes)
	}
	var e Entry
	if err := decodeStrict(leaf, &e); err != nil {
		return Entry{}, fmt.Errorf("ledgerlog: leaf: %w", err)
	}
	canon, err := e.Canonical()
	if err != nil {
		return Entry{}, err
	}
	if !bytes.Equal(canon, leaf) {
		return Entry{}, fmt.Errorf("ledgerlog: entry %d: leaf is not in canonical (RFC 8785) form", e.Index)
	}
	return e, nil
}

// decodeStrict decodes exactly one JSON value with no unknown fields.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

// LeafHash is the RFC 6962 leaf hash, SHA-256(0x00 || leaf).
func LeafHash(leaf []byte) tlog.Hash { return tlog.RecordHash(leaf) }
