package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/msgtypes/typestore"
	"github.com/alpd-project/alpd/internal/projection"
	"github.com/alpd-project/alpd/services/policy/relationships"
	"github.com/alpd-project/alpd/services/policy/rules"
	"github.com/alpd-project/alpd/services/policy/rulestore"
)

// Error codes of this API. Refused rule text answers the rules package's
// codes (rules.Code*: cedar_parse, missing_id, unknown_attribute,
// loosening_refused …) and rulestore.CodeVersionConflict; refused schemas
// the registry's (msgtypes.Code*: unclassified_property,
// name_collides_with_builtin …); sessions and CSRF signin's codes; bearer
// credentials agentauth's (RFC 6750) codes.
const (
	CodeNotReady = "not_ready"
	// CodeAuthRequired: no credential at all (with the bearer challenge).
	CodeAuthRequired = "authentication_required"
	// CodeWebSessionsUnavailable: this process cannot check web sessions
	// (identity runs elsewhere: split mode).
	CodeWebSessionsUnavailable = "web_sessions_unavailable"
	CodeAdminRoleRequired      = "admin_role_required"
	CodeInvalidRequest         = "invalid_request"
	CodeNotFound               = "not_found"
	CodeMethodNotAllowed       = "method_not_allowed"
	CodeConnectionNotFound     = "connection_not_found"
	CodeConnectionState        = "connection_state"
	// CodeAskerNotTold: a connection accepted here whose asker at another
	// broker could not be told yet (accepting again tells them).
	CodeAskerNotTold    = "asker_not_told"
	CodeUnknownSet      = "unknown_set"
	CodeTypeNotFound    = "type_not_found"
	CodeTenantNotHosted = "tenant_not_hosted"
	// CodePreconditionRequired: a rule write without If-Match.
	CodePreconditionRequired = "precondition_required"
	CodeInvalidIfMatch       = "invalid_if_match"
	CodeBodyTooLarge         = httproute.CodeBodyTooLarge
)

func internalError(err error, msg string) *httpjson.Error {
	return &httpjson.Error{Status: http.StatusInternalServerError, Code: httpjson.CodeInternal, Message: msg, Cause: err}
}

func badRequest(format string, args ...any) *httpjson.Error {
	return httpjson.Errorf(http.StatusBadRequest, CodeInvalidRequest, format, args...)
}

// closed is the answer of a write after the stores closed (shutdown).
func closed(err error) *httpjson.Error {
	e := httpjson.Errorf(http.StatusServiceUnavailable, CodeNotReady, "policy is stopping; try again")
	e.RetryAfter, e.Cause = 1, err
	return e
}

// versionConflict is a ConflictError's member of "problems".
type versionConflict struct {
	Code     string `json:"code"`
	Expected uint64 `json:"expected"`
	Current  uint64 `json:"current"`
}

// ruleError maps a rulestore refusal: a *rules.ValidationError is 422
// with every problem (403 when it is an agent's loosening), a
// *rulestore.ConflictError 409; nothing was stored either way.
func ruleError(err error) *httpjson.Error {
	var ve *rules.ValidationError
	var ce *rulestore.ConflictError
	switch {
	case errors.As(err, &ve):
		status, code := http.StatusUnprocessableEntity, string(rules.CodeCedarParse)
		if len(ve.Problems) > 0 {
			code = string(ve.Problems[0].Code)
		}
		if ve.Has(rules.CodeLooseningRefused) {
			// An agent's write that is not only a tightening: a valid set
			// the writer may not store.
			status, code = http.StatusForbidden, string(rules.CodeLooseningRefused)
		}
		return &httpjson.Error{Status: status, Code: code, Message: strings.TrimPrefix(ve.Error(), "rules: "), Problems: ve.Problems}
	case errors.As(err, &ce):
		return &httpjson.Error{Status: http.StatusConflict, Code: rulestore.CodeVersionConflict,
			Message:  "the set is at version " + itoa(ce.Current) + ", not the version " + itoa(ce.Expected) + " the write names: read it again and redo the change",
			Problems: []versionConflict{{Code: rulestore.CodeVersionConflict, Expected: ce.Expected, Current: ce.Current}}}
	case errors.Is(err, rulestore.ErrInvalid):
		return badRequest("%s", strings.TrimPrefix(err.Error(), "rulestore: invalid: "))
	case errors.Is(err, rulestore.ErrNotHosted):
		return httpjson.Errorf(http.StatusForbidden, CodeTenantNotHosted, "your organization is not hosted by this policy service")
	case errors.Is(err, projection.ErrClosed):
		return closed(err)
	}
	return internalError(err, "storing the rule set failed")
}

// typeError maps a typestore refusal: the registry's code with its JSON
// pointer into the schema.
func typeError(err error) *httpjson.Error {
	var re *msgtypes.RegistrationError
	switch {
	case errors.As(err, &re):
		status := http.StatusUnprocessableEntity
		switch re.Code {
		case msgtypes.CodeTypeExists, msgtypes.CodeNameCollidesWithBuiltin:
			status = http.StatusConflict
		case msgtypes.CodeInvalidName, msgtypes.CodeNameNotNamespaced:
			status = http.StatusBadRequest
		case msgtypes.CodeSchemaTooLarge:
			status = http.StatusRequestEntityTooLarge
		}
		return &httpjson.Error{Status: status, Code: string(re.Code), Message: re.Error(), Pointer: re.Pointer}
	case errors.Is(err, typestore.ErrInvalid):
		return badRequest("%s", strings.TrimPrefix(err.Error(), "typestore: invalid argument: "))
	case errors.Is(err, typestore.ErrNotHosted):
		return httpjson.Errorf(http.StatusForbidden, CodeTenantNotHosted, "your organization is not hosted by this policy service")
	case errors.Is(err, projection.ErrClosed):
		return closed(err)
	}
	return internalError(err, "registering the type failed")
}

// relError maps a relationships refusal.
func relError(err error) *httpjson.Error {
	switch {
	case errors.Is(err, relationships.ErrInvalid):
		return badRequest("%s", strings.TrimPrefix(err.Error(), "relationships: invalid: "))
	case errors.Is(err, relationships.ErrNotFound):
		return httpjson.Errorf(http.StatusNotFound, CodeConnectionNotFound, "no such connection of yours")
	case errors.Is(err, relationships.ErrState):
		return httpjson.Errorf(http.StatusConflict, CodeConnectionState, "%s", strings.TrimPrefix(err.Error(), "relationships: not in that state: "))
	case errors.Is(err, relationships.ErrNotHosted):
		return httpjson.Errorf(http.StatusForbidden, CodeTenantNotHosted, "your organization is not hosted by this policy service")
	case errors.Is(err, projection.ErrClosed):
		return closed(err)
	}
	return internalError(err, "updating relationships failed")
}

// bodyError maps a failed read of a request body: over the route's limit
// (a body of unknown length) is 413 like an announced one.
func bodyError(err error) *httpjson.Error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return httpjson.Errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the request body exceeds %d bytes", mb.Limit)
	}
	return badRequest("reading the request body failed")
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
