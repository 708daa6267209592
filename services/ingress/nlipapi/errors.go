package nlipapi

import (
	"errors"
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
	"github.com/alpd-project/alpd/internal/nmp"
	"github.com/alpd-project/alpd/services/ingress"
)

// A refused request is the shared *httpjson.Error (status, machine-readable
// code, human message, for some the JSON pointer of the part at fault, the
// retry delay and the authentication challenge), answered as an NLIP
// message instead of problem details (API.fail).

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

// classify turns an error from a step of handling into the answer: the
// NLIP and NMP decoders' own refusals (nlip_ and nmp_ codes), and
// everything of the send path, the inbox and the credential check as every
// door answers it (ingress.Problem).
func classify(err error) *httpjson.Error {
	var ne *nlip.Error
	var me *nmp.Error
	switch {
	case errors.As(err, &ne):
		status := http.StatusBadRequest
		if ne.Code == "too_large" {
			status = http.StatusRequestEntityTooLarge
		}
		return &httpjson.Error{Status: status, Code: "nlip_" + ne.Code, Message: ne.Message, Pointer: ne.Pointer}
	case errors.As(err, &me):
		return &httpjson.Error{Status: http.StatusBadRequest, Code: "nmp_" + me.Code, Message: "NMP header: " + me.Message, Pointer: "/submessages/nmp"}
	}
	return ingress.Problem(err)
}
