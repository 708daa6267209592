package nlipapi

import (
	"errors"
	"net/http"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/nmp"
	"github.com/alpd-project/alpd/services/ingress"
)

// A refused request is the shared *httpjson.Error (status, machine-readable
// code, human message, for some the JSON pointer of the part at fault, the
// retry delay and the authentication challenge), answered as an NLIP
// message instead of problem details (writeError).
func newError(status int, code, format string, args ...any) *httpjson.Error {
	return httpjson.Errorf(status, code, format, args...)
}

// errorMessage renders e as the NLIP reply: English text for people and
// clients that read text (AG2 reads the English text), plus a structured
// "alp.error" submessage for programs. ECMA-432 §11 shows errors as
// MessageType "Error" with text content; we follow it.
func errorMessage(e *httpjson.Error) *nlip.Message {
	detail := map[string]any{"status": e.Status, "code": e.Code, "message": e.Message}
	if e.Pointer != "" {
		detail["pointer"] = e.Pointer
	}
	if e.RetryAfter > 0 {
		detail["retry_after"] = e.RetryAfter
	}
	if e.Problems != nil {
		detail["problems"] = e.Problems
	}
	m := nlip.NewMessage(nlip.Text("english", e.Message), structured(labelError, detail))
	m.MessageType = "error"
	return m
}

// writeError answers an HTTP request with e.
func writeError(w http.ResponseWriter, r *http.Request, e *httpjson.Error) {
	e.SetHeaders(w.Header())
	writeMessage(w, r, e.Status, errorMessage(e))
}

// classify turns an error from a step of handling into the answer.
func classify(err error) *httpjson.Error {
	var ae *httpjson.Error
	var auth *agentauth.Error
	var ne *nlip.Error
	var me *nmp.Error
	var limited *ingress.RateLimited
	var halted *ingress.BudgetHalted
	var body *ingress.BodyError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &auth):
		code := auth.Code
		if code == "" {
			code = "unauthenticated"
		}
		e := &httpjson.Error{Status: auth.Status, Code: code, Message: auth.Description, Challenge: auth.Challenge}
		if auth.Status == http.StatusServiceUnavailable {
			e.RetryAfter = 1
		}
		return e
	case errors.As(err, &ne):
		status := http.StatusBadRequest
		if ne.Code == "too_large" {
			status = http.StatusRequestEntityTooLarge
		}
		return &httpjson.Error{Status: status, Code: "nlip_" + ne.Code, Message: ne.Message, Pointer: ne.Pointer}
	case errors.As(err, &me):
		return &httpjson.Error{Status: http.StatusBadRequest, Code: "nmp_" + me.Code, Message: "NMP header: " + me.Message, Pointer: "/submessages/nmp"}
	case errors.As(err, &limited):
		e := newError(http.StatusTooManyRequests, "rate_limited", "%s", limited.Description())
		e.RetryAfter = limited.RetryAfterSeconds()
		return e
	case errors.As(err, &halted):
		return newError(http.StatusUnprocessableEntity, "nmp_budget_halted", "%s", halted.Description())
	case errors.As(err, &body):
		e := newError(http.StatusUnprocessableEntity, body.Code, "%s", body.Description())
		if len(body.Errors) > 0 {
			e.Problems = body.Errors
		}
		return e
	case errors.Is(err, ingress.ErrTypesUnavailable):
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1, Cause: err,
			Message: "the broker cannot check message types right now; retry with the same idempotency key"}
	case errors.Is(err, ingress.ErrIdempotencyBodyDiffers):
		return newError(http.StatusUnprocessableEntity, "idempotency_body_mismatch", "%v", err)
	case errors.Is(err, ingress.ErrIdempotencyKeyReused):
		return newError(http.StatusUnprocessableEntity, "idempotency_key_reused", "%v", err)
	case errors.Is(err, ingress.ErrTooLarge):
		return newError(http.StatusRequestEntityTooLarge, "envelope_too_large", "%v", err)
	case errors.Is(err, ingress.ErrInvalidEnvelopeID):
		return newError(http.StatusBadRequest, "invalid_envelope_id", "%v", err)
	case errors.Is(err, ingress.ErrInvalid), errors.Is(err, bus.ErrInvalidSubject):
		// A subject the bus refused is built from the request: retrying
		// the same request cannot help.
		return newError(http.StatusBadRequest, "invalid_alp_message", "%v", err)
	}
	return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: "unavailable", RetryAfter: 1,
		Message: "the broker could not take the message right now; retry with the same idempotency key"}
}
