package broker

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/policy"
	"github.com/alpd-project/alpd/services/policy/rules"
)

// policyOptions configure the policy service: its workers, and its REST
// endpoints with the same token checks as ingress (ingress's own when it
// runs here too) and identity's web sessions when identity runs in this
// process. In split mode policy's processes follow identity themselves and
// take agents' bearer tokens only (docs/policy.md).
func (b *Broker) policyOptions() policy.Options {
	o := policy.Options{Workers: b.cfg.PolicyWorkers, Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"broker": b.cfg.Name}, b.deps.Registerer), API: policy.APIOptions{Issuers: b.issuers(), Resource: b.publicURL(),
		ResourceMetadataURL: b.publicURL() + identity.ResourceMetadataPath}}
	if b.Runs("identity") {
		o.API.Sessions = identitySessions{b}
	}
	o.API.UI = b.ui()
	if b.ingress != nil {
		o.API.Auth = ingressAuth{b.ingress}
	}
	return o
}

// PathPolicyPush is the operator's endpoint for `alpctl policy push`.
const PathPolicyPush = "/v1/ops/policy/push"

// PolicyPushRequest is the body of POST /v1/ops/policy/push: policy's
// PushRuleSetRequest as JSON. ExpectVersion absent: replace whatever
// version is current.
type PolicyPushRequest struct {
	Tenant        string  `json:"tenant"`
	Party         string  `json:"party"`
	Owner         string  `json:"owner,omitempty"`
	Text          string  `json:"text"`
	ExpectVersion *uint64 `json:"expect_version,omitempty"`
}

// PolicyPushResult answers a stored push.
type PolicyPushResult struct {
	Tenant  string `json:"tenant"`
	Party   string `json:"party"`
	Owner   string `json:"owner"`
	Version uint64 `json:"version"`
	Digest  string `json:"digest"`
}

// PolicyProblem is one problem of a refused push, as in problems.
type PolicyProblem struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	PolicyID string `json:"policy_id,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
}

// policyPushBody bounds the push: the engine's largest set, JSON-escaped.
const policyPushBody = 2*rules.DefaultMaxBytes + 4<<10

// policyPush serves POST /v1/ops/policy/push: an operator stores a rule
// set through policy's PushRuleSet, here in the process (gRPC in memory),
// so the push needs a process that runs policy.
func (b *Broker) policyPush(w http.ResponseWriter, r *http.Request, operator string) {
	var in PolicyPushRequest
	client, ok := b.policyRequest(w, r, &in, "{tenant, party, owner, text, expect_version}")
	if !ok {
		return
	}
	ctx := metadata.AppendToOutgoingContext(r.Context(), policy.OperatorMetadata, operator)
	res, err := client.PushRuleSet(ctx, &policyv1.PushRuleSetRequest{
		Tenant: in.Tenant, Party: in.Party, Owner: in.Owner, Text: in.Text, ExpectVersion: in.ExpectVersion})
	if err != nil {
		httpjson.WriteError(w, pushError(err))
		return
	}
	owner := in.Owner
	if owner == "" {
		owner = in.Tenant
	}
	b.log.Info("operator pushed a rule set", "operator", operator, "tenant", in.Tenant, "party", in.Party, "owner", owner, "version", res.GetVersion())
	httpjson.Write(w, http.StatusOK, PolicyPushResult{Tenant: in.Tenant, Party: in.Party, Owner: owner, Version: res.GetVersion(), Digest: res.GetDigest()})
}

// pushError maps PushRuleSet's status to the problem an operator reads:
// the refusal's code and every problem with line and column.
func pushError(err error) *httpjson.Error {
	st := status.Convert(err)
	var d *policyv1.RuleSetRefused
	for _, x := range st.Details() {
		if v, ok := x.(*policyv1.RuleSetRefused); ok {
			d = v
		}
	}
	switch {
	case d != nil && st.Code() == codes.Aborted:
		return &httpjson.Error{Status: http.StatusConflict, Code: d.GetCode(), Message: st.Message(),
			Problems: []map[string]any{{"code": d.GetCode(), "current": d.GetCurrentVersion()}}}
	case d != nil:
		ps := make([]PolicyProblem, 0, len(d.GetProblems()))
		for _, p := range d.GetProblems() {
			ps = append(ps, PolicyProblem{Code: p.GetCode(), Message: p.GetMessage(), PolicyID: p.GetPolicyId(), Line: int(p.GetLine()), Column: int(p.GetColumn())})
		}
		return &httpjson.Error{Status: http.StatusUnprocessableEntity, Code: d.GetCode(), Message: st.Message(), Problems: ps}
	case st.Code() == codes.InvalidArgument:
		return httpjson.Errorf(http.StatusBadRequest, "invalid_request", "%s", st.Message())
	case st.Code() == codes.Unavailable:
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: "policy_unavailable", Message: st.Message(), RetryAfter: 1}
	}
	return &httpjson.Error{Status: http.StatusInternalServerError, Code: httpjson.CodeInternal, Message: "the push failed", Cause: err}
}

// policyRequest starts an operator's request to policy, which runs here in
// the process (gRPC in memory): it decodes the JSON body into in, strictly
// (shape names its members for the error), and answers policy's client;
// false means the error has been written.
func (b *Broker) policyRequest(w http.ResponseWriter, r *http.Request, in any, shape string) (policyv1.PolicyServiceClient, bool) {
	if !b.Runs("policy") {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "policy_unavailable",
			"this process does not run policy: send this to one that does"))
		return nil, false
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			httpjson.WriteError(w, httpjson.Errorf(http.StatusRequestEntityTooLarge, httproute.CodeBodyTooLarge, "the request body exceeds %d bytes", mb.Limit))
			return nil, false
		}
		httpjson.WriteError(w, httpjson.Errorf(http.StatusBadRequest, "invalid_request", "the body must be %s: %v", shape, err))
		return nil, false
	}
	conn, err := b.Client(alpv1.Role_ROLE_POLICY)
	if err != nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "policy_unavailable", "%v", err))
		return nil, false
	}
	return policyv1.NewPolicyServiceClient(conn), true
}
