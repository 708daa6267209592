package nlipapi

import (
	"fmt"
	"strings"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/nlip"
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

// outcomePending: policy has not decided within the wait.
const outcomePending = "pending"

var outcomes = map[alpv1.Outcome]string{
	alpv1.Outcome_OUTCOME_DELIVER:         "deliver",
	alpv1.Outcome_OUTCOME_DELIVER_PARTIAL: "deliver_partial",
	alpv1.Outcome_OUTCOME_HOLD:            "hold",
	alpv1.Outcome_OUTCOME_REFUSE:          "refuse",
}

// result describes envelope id as sent (env) and decided (d, nil while
// pending).
func (a *API) result(id string, env *alpv1.Envelope, d *alpv1.Decided) *result {
	r := &result{EnvelopeID: id, Type: env.GetType(), To: env.GetTo(), Outcome: outcomePending}
	if d == nil {
		r.Poll = a.cfg.PublicURL + "/nlip/envelopes/" + id
		return r
	}
	if o, ok := outcomes[d.GetOutcome()]; ok {
		r.Outcome = o
	}
	for _, rs := range d.GetReasons() {
		r.Reasons = append(r.Reasons, reason{Party: rs.GetParty(), Rule: rs.GetRule(), Field: rs.GetField(), Message: rs.GetMessage()})
	}
	return r
}

// message renders the result as an NLIP reply: an English sentence (what
// AG2 and nlip_sdk clients read) and the structured "alp.result".
func (r *result) message() *nlip.Message {
	var b strings.Builder
	fmt.Fprintf(&b, "Envelope %s (%s to %s): ", r.EnvelopeID, r.Type, r.To)
	switch r.Outcome {
	case outcomePending:
		fmt.Fprintf(&b, "accepted, policy has not decided yet; poll %s.", r.Poll)
	case "deliver":
		b.WriteString("allowed for delivery.")
	case "deliver_partial":
		b.WriteString("allowed for delivery with some fields withheld.")
	case "hold":
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
