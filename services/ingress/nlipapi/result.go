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
	Poll       string   `json:"poll,omitempty"`
	Duplicate  bool     `json:"duplicate,omitempty"`
	NMPIgnored []string `json:"nmp_ignored,omitempty"`
	// NMPConflicts are the NMP conflict rules the agent's signals trip.
	NMPConflicts []string `json:"nmp_conflicts,omitempty"`
}

type reason struct {
	Party   string `json:"party"`
	Rule    string `json:"rule"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// result describes an outcome; the poll URL is NLIP's own.
func (a *API) result(o ingress.Outcome) *result {
	r := &result{EnvelopeID: o.EnvelopeID, Type: o.Type, To: o.To, Outcome: o.Outcome, Duplicate: o.Duplicate}
	if !o.Decided {
		r.Poll = a.cfg.PublicURL + "/nlip/envelopes/" + o.EnvelopeID
		return r
	}
	for _, rs := range o.Reasons {
		r.Reasons = append(r.Reasons, reason{Party: rs.Party, Rule: rs.Rule, Field: rs.Field, Message: rs.Message})
	}
	return r
}

// message renders the result as an NLIP reply: an English sentence (what
// AG2 and nlip_sdk clients read) and the structured "alp.result".
func (r *result) message() *nlip.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "Envelope %s (%s to %s): ", r.EnvelopeID, r.Type, r.To)
	switch r.Outcome {
	case ingress.OutcomePending:
		fmt.Fprintf(&b, "accepted, policy has not decided yet; poll %s.", r.Poll)
	case ingress.OutcomeDeliver:
		b.WriteString("allowed for delivery.")
	case ingress.OutcomeDeliverPartial:
		b.WriteString("allowed for delivery with some fields withheld.")
	case ingress.OutcomeHold:
		b.WriteString("held for approval.")
	default:
		b.WriteString("refused.")
	}
	for _, rs := range r.Reasons {
		fmt.Fprintf(&b, " %s rule %s: %s", rs.Party, rs.Rule, rs.Message)
		if !strings.HasSuffix(rs.Message, ".") {
			b.WriteString(".")
		}
	}
	if r.Duplicate {
		b.WriteString(" (A retry: the envelope was already submitted.)")
	}
	return nlip.NewMessage(nlip.Text("english", b.String()), structured(labelResult, r))
}
