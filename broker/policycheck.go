package broker

import (
	"encoding/json"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
)

// PathPolicyCheck is the operator's endpoint for `alpctl policy check`.
const PathPolicyCheck = "/v1/ops/policy/check"

// policyCheckBody bounds a dry run: an NLIP message's body and the rest.
var policyCheckBody = int64(nlip.DefaultLimits().MaxMessageBytes) + 4<<10

// PolicyCheckRequest is the body of POST /v1/ops/policy/check: a message
// that is never sent.
type PolicyCheckRequest struct {
	Tenant     string          `json:"tenant"`
	From       string          `json:"from"`
	TrustClass string          `json:"trust_class,omitempty"`
	To         string          `json:"to"`
	Type       string          `json:"type"`
	Body       json.RawMessage `json:"body"`
	// RecipientAgents are the recipient's agents' trust classes (empty:
	// both).
	RecipientAgents []string `json:"recipient_agents,omitempty"`
}

// PolicyReason is one reason of a verdict: the party, its policy id (every
// party's, for the operator) and the public code.
type PolicyReason struct {
	Party    string `json:"party"`
	PolicyID string `json:"policy_id,omitempty"`
	Code     string `json:"code"`
	Message  string `json:"message,omitempty"`
}

// PolicyField is one field's verdict.
type PolicyField struct {
	Pointer  string         `json:"pointer"`
	Class    string         `json:"class"`
	FreeText bool           `json:"freetext,omitempty"`
	Action   string         `json:"action"`
	Reasons  []PolicyReason `json:"reasons,omitempty"`
	DLP      []string       `json:"dlp,omitempty"`
}

// PolicyCheckResult answers a dry run.
type PolicyCheckResult struct {
	Outcome               string              `json:"outcome"`
	SenderOutcome         string              `json:"sender_outcome"`
	Reasons               []PolicyReason      `json:"reasons,omitempty"`
	Fields                []PolicyField       `json:"fields"`
	Views                 map[string][]string `json:"views,omitempty"`
	Held                  []PolicyHeld        `json:"held,omitempty"`
	SenderRelationship    string              `json:"sender_relationship,omitempty"`
	RecipientRelationship string              `json:"recipient_relationship,omitempty"`
	RecipientLocal        bool                `json:"recipient_local"`
	RuleVersions          []string            `json:"rule_versions,omitempty"`
}

// PolicyHeld is one item the recipient would be asked about.
type PolicyHeld struct {
	Kind     string   `json:"kind"`
	Pointers []string `json:"pointers"`
	Commits  string   `json:"commits,omitempty"`
}

// policyCheck serves POST /v1/ops/policy/check through policy's DryRun,
// here in the process, like policyPush.
func (b *Broker) policyCheck(w http.ResponseWriter, r *http.Request, operator string) {
	var in PolicyCheckRequest
	client, ok := b.policyRequest(w, r, &in, "{tenant, from, trust_class, to, type, body, recipient_agents}")
	if !ok {
		return
	}
	if len(in.Body) == 0 {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "invalid_request", "body: the message body is required"))
		return
	}
	res, err := client.DryRun(r.Context(), &policyv1.DryRunRequest{
		Tenant: in.Tenant, From: in.From, TrustClass: in.TrustClass, To: in.To, Type: in.Type, Body: in.Body,
		RecipientAgentClasses: in.RecipientAgents})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.InvalidArgument:
			httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "invalid_request", "%s", st.Message()))
		case codes.NotFound:
			httpjson.WriteError(w, httpjson.Errorf(http.StatusNotFound, "unknown_sender", "%s", st.Message()))
		case codes.Unavailable:
			httpjson.WriteError(w, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: "policy_unavailable", Message: st.Message(), RetryAfter: 1})
		default:
			httpjson.WriteError(w, &httpjson.Error{Status: http.StatusInternalServerError, Code: httpjson.CodeInternal, Message: "the dry run failed", Cause: err})
		}
		return
	}
	b.log.Info("operator ran a policy check", "operator", operator, "tenant", in.Tenant, "type", in.Type)
	httpjson.Write(w, http.StatusOK, checkResult(res))
}

func checkResult(res *policyv1.DryRunResponse) PolicyCheckResult {
	out := PolicyCheckResult{Outcome: outcomeName(res.GetOutcome()), SenderOutcome: outcomeName(res.GetSenderOutcome()),
		Reasons: policyReasons(res.GetReasons()), Fields: []PolicyField{}, RecipientLocal: res.GetRecipientLocal(),
		SenderRelationship: res.GetSenderRelationship(), RecipientRelationship: res.GetRecipientRelationship(),
		RuleVersions: res.GetRuleVersions()}
	for _, f := range res.GetFields() {
		out.Fields = append(out.Fields, PolicyField{Pointer: f.GetPointer(), Class: f.GetClass(), FreeText: f.GetFreetext(),
			Action: enumName(f.GetAction().String(), "FIELD_ACTION_"), Reasons: policyReasons(f.GetReasons()), DLP: f.GetDlp()})
	}
	for _, v := range res.GetViews() {
		if out.Views == nil {
			out.Views = map[string][]string{}
		}
		out.Views[v.GetTrustClass()] = append([]string{}, v.GetPointers()...)
	}
	for _, h := range res.GetHeld() {
		out.Held = append(out.Held, PolicyHeld{Kind: enumName(h.GetKind().String(), "HELD_KIND_"), Pointers: h.GetPointers(), Commits: h.GetCommits()})
	}
	return out
}

func policyReasons(rs []*alpv1.Reason) []PolicyReason {
	var out []PolicyReason
	for _, r := range rs {
		out = append(out, PolicyReason{Party: r.GetParty(), PolicyID: r.GetRule(), Code: r.GetCode(), Message: r.GetMessage()})
	}
	return out
}

func outcomeName(o alpv1.Outcome) string { return enumName(o.String(), "OUTCOME_") }

// enumName is a protobuf enum value's name as the JSON APIs spell it:
// OUTCOME_DELIVER_PARTIAL → deliver_partial.
func enumName(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}
