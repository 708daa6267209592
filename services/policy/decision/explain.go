package decision

import (
	"strings"

	"github.com/alpd-project/alpd/services/policy/dlp"
)

// hardRuleText says in English what each hard rule's code means; the
// reason codes table of docs/policy.md is the same list.
var hardRuleText = map[string]string{
	CodeInvalidBody:      "the body does not match its message type's schema",
	CodeUnknownType:      "the message type is not known here",
	CodeBlocked:          "one side blocked the other",
	CodeStranger:         "the two are not connected: a stranger may only send connection.request/v1",
	CodeNothingAllowed:   "no field of the message may cross",
	CodeConnectionHeld:   "a connection request waits for the person to answer",
	CodeCommitmentHeld:   "the message commits the recipient and waits for their approval",
	CodeStandingApproval: "the recipient's standing approval covers this commitment",
	CodeConfidentialHeld: "confidential fields wait for the person before their consumer-class agents see them",
	CodeFreeTextTooLong:  "free text is longer than 280 characters after normalization",
}

// Explain is a reason in English, for the agent's answer and logs. A
// party's reason is its policy's public @reason code; a DLP reason names
// the detector, never what it matched.
func Explain(r Reason) string {
	if t, ok := hardRuleText[r.Code]; ok {
		return t
	}
	if d, ok := strings.CutPrefix(r.Code, codeDLPPrefix); ok && dlp.SeverityOf(dlp.Detector(d)) != "" {
		return "free text holds what looks like " + strings.ReplaceAll(d, "_", " ") + "; it may not cross"
	}
	if r.Party == PartyBroker {
		return "the broker refused (" + r.Code + ")"
	}
	return "the " + strings.ReplaceAll(r.Party, "_", " ") + "'s rules do not allow it (" + r.Code + ")"
}
