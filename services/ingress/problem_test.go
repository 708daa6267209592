package ingress_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// TestProblem: every error of the send path, the inbox and the credential
// check has one answer, whichever door meets it, wrapped or not; what
// Problem does not know is a 503 to retry.
func TestProblem(t *testing.T) {
	peer := &httpjson.Error{Status: http.StatusServiceUnavailable, Code: ingress.CodePolicyUnavailable, Message: "policy cannot be reached"}
	for _, c := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter int
		challenge  bool
	}{
		{"a peer's answer", fmt.Errorf("x: %w", peer), 503, ingress.CodePolicyUnavailable, 0, false},
		{"no credential", &agentauth.Error{Status: 401, Description: "a bearer token is required", Challenge: `Bearer resource_metadata="x"`}, 401, ingress.CodeAuthRequired, 0, true},
		{"a refused credential", &agentauth.Error{Status: 401, Code: "invalid_token", Description: "expired", Challenge: "Bearer"}, 401, "invalid_token", 0, true},
		{"stale revocations", &agentauth.Error{Status: 503, Code: "temporarily_unavailable", Description: "stale"}, 503, "temporarily_unavailable", 1, false},
		{"over the rate", &ingress.RateLimited{Kind: "agent", RetryAfter: 1500 * time.Millisecond}, 429, ingress.CodeRateLimited, 2, false},
		{"budget spent", &ingress.BudgetHalted{TokensUsed: 95, MaxTokens: 100, Percent: 95}, 422, ingress.CodeBudgetHalted, 0, false},
		{"unknown type on a send", &ingress.BodyError{Code: ingress.CodeUnknownMessageType, Type: "x/v1"}, 422, ingress.CodeUnknownMessageType, 0, false},
		{"a body its schema refuses", &ingress.BodyError{Code: ingress.CodeInvalidBody, Type: "note/v1",
			Errors: msgtypes.ValidationErrors{{Pointer: "/text", Keyword: "required"}}}, 422, ingress.CodeInvalidBody, 0, false},
		{"no such type", fmt.Errorf("%w: %q", ingress.ErrUnknownType, "x/v1"), 404, ingress.CodeUnknownMessageType, 0, false},
		{"types unavailable", ingress.ErrTypesUnavailable, 503, ingress.CodeUnavailable, 1, false},
		{"another body", ingress.ErrIdempotencyBodyDiffers, 422, ingress.CodeIdempotencyBodyMismatch, 0, false},
		{"another message", ingress.ErrIdempotencyKeyReused, 422, ingress.CodeIdempotencyKeyReused, 0, false},
		{"too large", ingress.ErrTooLarge, 413, ingress.CodeEnvelopeTooLarge, 0, false},
		{"another sender", ingress.ErrSenderMismatch, 403, ingress.CodeSenderMismatch, 0, false},
		{"unknown envelope", fmt.Errorf("%w: x", ingress.ErrUnknownEnvelope), 404, ingress.CodeUnknownEnvelope, 0, false},
		{"not a UUID", ingress.ErrInvalidEnvelopeID, 400, ingress.CodeInvalidEnvelopeID, 0, false},
		{"an invalid submission", fmt.Errorf("%w: no envelope", ingress.ErrInvalid), 400, ingress.CodeInvalidMessage, 0, false},
		{"a subject the bus refuses", bus.ErrInvalidSubject, 400, ingress.CodeInvalidMessage, 0, false},
		{"no such item", fmt.Errorf("%w: %q", inbox.ErrNotFound, "x"), 404, ingress.CodeNotFound, 0, false},
		{"a foreign cursor", &inbox.CursorError{Cursor: "x"}, 400, ingress.CodeInvalidCursor, 0, false},
		{"a page too large", &inbox.LimitError{Limit: 101}, 400, ingress.CodeInvalidLimit, 0, false},
		{"an empty ack", fmt.Errorf("%w: acknowledge 1 to 100 items at a time", inbox.ErrInvalid), 400, ingress.CodeInvalidRequest, 0, false},
		{"inbox unavailable", fmt.Errorf("%w: x", inbox.ErrUnavailable), 503, ingress.CodeInboxUnavailable, 1, false},
		{"anything else", errors.New("nats: timeout"), 503, ingress.CodeUnavailable, 1, false},
	} {
		e := ingress.Problem(c.err)
		if e.Status != c.status || e.Code != c.code || e.RetryAfter != c.retryAfter || (e.Challenge != "") != c.challenge || e.Message == "" || e.Pointer != "" {
			t.Errorf("%s: %+v, want %d %s retry %d challenge %v", c.name, e, c.status, c.code, c.retryAfter, c.challenge)
		}
	}
	body := ingress.Problem(&ingress.BodyError{Code: ingress.CodeInvalidBody, Type: "note/v1", Errors: msgtypes.ValidationErrors{{Pointer: "/text"}}})
	if body.Problems == nil {
		t.Errorf("a refused body's problems: %+v", body)
	}
}
