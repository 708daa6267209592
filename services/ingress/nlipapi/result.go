package nlipapi

import (
	"fmt"
	"strings"

	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/services/ingress"
)

// result is the broker's answer about one envelope.
type result struct {
	EnvelopeID string   `json:"envelope_id"`
	Type       string   `json:"type"`
	To         string   `json:"to"`
	Outcome    string   `json:"outcome"`
	Reasons    []reason `json:"reasons,omitempty"`
	// Fields are every field's verdict, as the sender may see them.
	Fields     []field  `json:"fields,omitempty"`
	Poll       string   `json:"poll,omitempty"`
	Duplicate  bool     `json:"duplicate,omitempty"`
	NMPIgnored []string `json:"nmp_ignored,omitempty"`
	// NMPConflicts are the NMP conflict rules the agent's signals trip.
	NMPConflicts []string `json:"nmp_conflicts,omitempty"`
	// Delivery: for a recipient at another broker, where it stands.
	Delivery *ingress.Delivery `json:"delivery,omitempty"`
	// Approval: for a recipient here asked to decide part of it, their
	// decisions.
	Approval *ingress.Approval `json:"approval,omitempty"`
}

// reason names the party and, where the sender may see it, its rule (the
// policy id); code is the public reason code.
type reason struct {
	Party   string `json:"party"`
	Rule    string `json:"rule,omitempty"`
	Field   string `json:"field,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

type field struct {
	Pointer string   `json:"pointer"`
	Class   string   `json:"class,omitempty"`
	Action  string   `json:"action"`
	Reasons []reason `json:"reasons,omitempty"`
}

func reasonsOf(rs []ingress.Reason) []reason {
	var out []reason
	for _, rs := range rs {
		out = append(out, reason{Party: rs.Party, Rule: rs.Rule, Field: rs.Field, Code: rs.Code, Message: rs.Message})
	}
	return out
}

// result describes an outcome; the poll URL is NLIP's own.
func (a *API) result(o ingress.Outcome) *result {
	r := &result{EnvelopeID: o.EnvelopeID, Type: o.Type, To: o.To, Outcome: o.Outcome, Duplicate: o.Duplicate}
	if !o.Decided {
		r.Poll = a.cfg.PublicURL + "/nlip/envelopes/" + o.EnvelopeID
		return r
	}
	r.Reasons, r.Delivery, r.Approval = reasonsOf(o.Reasons), o.Delivery, o.Approval
	for _, f := range o.Fields {
		r.Fields = append(r.Fields, field{Pointer: f.Pointer, Class: f.Class, Action: f.Action, Reasons: reasonsOf(f.Reasons)})
	}
	return r
}

// listedFields bounds the fields the English text names per action; the
// structured result lists them all.
const listedFields = 10

// message renders the result as an NLIP reply: an English sentence (what
// AG2 and nlip_sdk clients read) and the structured "alp.result".
func (r *result) message() *nlip.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "Envelope %s (%s to %s): ", r.EnvelopeID, r.Type, r.To)
	var allowed, denied, held []field
	for _, f := range r.Fields {
		switch f.Action {
		case ingress.ActionAllow:
			allowed = append(allowed, f)
		case ingress.ActionHold:
			held = append(held, f)
		default:
			denied = append(denied, f)
		}
	}
	switch r.Outcome {
	case ingress.OutcomePending:
		fmt.Fprintf(&b, "accepted, policy has not decided yet; poll %s.", r.Poll)
	case ingress.OutcomeDeliver:
		b.WriteString("allowed for delivery")
		if n := len(r.Fields); n > 0 && len(allowed) == n {
			fmt.Fprintf(&b, ", all %d fields", n)
		}
	case ingress.OutcomeDeliverPartial:
		if len(r.Fields) > 0 {
			fmt.Fprintf(&b, "delivered %d of %d fields", len(allowed), len(r.Fields))
		} else {
			b.WriteString("allowed for delivery with some fields withheld")
		}
	case ingress.OutcomeHold:
		b.WriteString("held for approval")
	default:
		b.WriteString("refused")
	}
	if r.Outcome != ingress.OutcomePending {
		if r.Outcome != ingress.OutcomeRefuse || len(allowed) > 0 {
			// A refusal crosses nothing: its fields are not each withheld.
			writeFields(&b, "withheld", denied)
		}
		writeFields(&b, "held for approval", held)
		b.WriteString(".")
	}
	for _, rs := range r.Reasons {
		b.WriteString(" ")
		writeReason(&b, rs)
		text := rs.Message
		if text == "" {
			text = rs.Code
		}
		if text != "" {
			b.WriteString(": " + text)
		}
		if !strings.HasSuffix(text, ".") {
			b.WriteString(".")
		}
	}
	if d := r.Delivery; d != nil {
		fmt.Fprintf(&b, " Delivery to the recipient's broker: %s", d.State)
		if d.Code != "" {
			fmt.Fprintf(&b, " (%s)", d.Code)
		}
		b.WriteString(".")
	}
	if ap := r.Approval; ap != nil {
		fmt.Fprintf(&b, " The recipient's approval: %s", ap.State)
		for i, it := range ap.Items {
			sep := ", "
			if i == 0 {
				sep = " ("
			}
			fmt.Fprintf(&b, "%s%s %s", sep, strings.ReplaceAll(it.Kind, "_", " "), it.State)
		}
		if len(ap.Items) > 0 {
			b.WriteString(")")
		}
		b.WriteString(".")
	}
	if r.Duplicate {
		b.WriteString(" (A retry: the envelope was already submitted.)")
	}
	return nlip.NewMessage(nlip.Text("english", b.String()), structured(labelResult, r))
}

// writeFields appends "; 2 withheld: /budget (recipient_org: confidential_egress), …".
func writeFields(b *strings.Builder, what string, fs []field) {
	if len(fs) == 0 {
		return
	}
	fmt.Fprintf(b, "; %d %s: ", len(fs), what)
	for i, f := range fs {
		if i == listedFields {
			fmt.Fprintf(b, " and %d more", len(fs)-listedFields)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Pointer)
		if len(f.Reasons) > 0 {
			b.WriteString(" (")
			for j, rs := range f.Reasons {
				if j > 0 {
					b.WriteString("; ")
				}
				writeReason(b, rs)
				if rs.Code != "" {
					b.WriteString(": " + rs.Code)
				}
			}
			b.WriteString(")")
		}
	}
}

// writeReason names a reason's party and, when the sender may see it, its
// rule: "sender_org rule no-cards", "recipient_org".
func writeReason(b *strings.Builder, rs reason) {
	b.WriteString(rs.Party)
	if rs.Rule != "" {
		b.WriteString(" rule " + rs.Rule)
	}
}
