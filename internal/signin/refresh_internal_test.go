package signin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"golang.org/x/oauth2"
)

// TestRefreshErrorMapping pins which refresh failures mean "sign in again"
// (ErrIdPRefused) and which a caller may wait out (ErrIdPUnavailable): any
// OAuth error but temporarily_unavailable and server_error is a dead token,
// whatever code the IdP picks for it (Dex answers invalid_request).
func TestRefreshErrorMapping(t *testing.T) {
	answer := func(status int, code string) error {
		return &oauth2.RetrieveError{Response: &http.Response{StatusCode: status, Header: http.Header{}}, ErrorCode: code}
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"invalid_grant", answer(400, "invalid_grant"), ErrIdPRefused},
		{"Dex's invalid_request", answer(400, "invalid_request"), ErrIdPRefused},
		{"invalid_client", answer(401, "invalid_client"), ErrIdPRefused},
		{"unauthorized_client", answer(400, "unauthorized_client"), ErrIdPRefused},
		{"invalid_scope", answer(400, "invalid_scope"), ErrIdPRefused},
		{"an IdP's own code", answer(400, "refresh_token_revoked"), ErrIdPRefused},
		{"temporarily_unavailable", answer(400, "temporarily_unavailable"), ErrIdPUnavailable},
		{"server_error", answer(400, "server_error"), ErrIdPUnavailable},
		{"503 temporarily_unavailable", answer(503, "temporarily_unavailable"), ErrIdPUnavailable},
		{"5xx with invalid_grant", answer(502, "invalid_grant"), ErrIdPUnavailable},
		{"5xx without a body", answer(500, ""), ErrIdPUnavailable},
		{"429 with a code", answer(429, "invalid_request"), ErrIdPUnavailable},
		{"4xx without an OAuth error", answer(404, ""), ErrIdPUnavailable},
		{"no answer", &url.Error{Op: "Post", URL: "https://idp/token", Err: errors.New("connection refused")}, ErrIdPUnavailable},
		{"timeout", context.DeadlineExceeded, ErrIdPUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := classifyRefreshError("example.org", c.err)
			if !errors.Is(got, c.want) {
				t.Fatalf("classified as %v, want %v", got, c.want)
			}
			if got.Transient() != (c.want == ErrIdPUnavailable) {
				t.Fatalf("Transient() = %v", got.Transient())
			}
		})
	}
	e := classifyRefreshError("example.org", answer(400, "invalid_request\x00\n"))
	if e.Code != "invalid_request" || e.Status != 400 {
		t.Fatalf("code %q status %d", e.Code, e.Status)
	}
}
