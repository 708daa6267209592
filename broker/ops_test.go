package broker

import (
	"net/http"
	"testing"
)

// TestOperatorBearerSchemeCaseInsensitive: RFC 9110 §11.1 makes the
// authentication scheme case-insensitive, so "bearer" and "BEARER" name the
// same credential as "Bearer" (issue 10, finding 12).
func TestOperatorBearerSchemeCaseInsensitive(t *testing.T) {
	token, hash := NewOperatorToken()
	a := newOpsAuth([]Operator{{Name: "ops-1", TokenSHA256: hash}}, OpsLimits{})
	for _, authz := range []string{"Bearer " + token, "bearer " + token, "BEARER " + token, "bEaReR  " + token} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/ops/trace", nil)
		r.Header.Set("Authorization", authz)
		if name, ok := a.authenticate(r); !ok || name != "ops-1" {
			t.Errorf("%q: got (%q, %v), want ops-1", authz[:7], name, ok)
		}
	}
	for _, authz := range []string{"", "Basic " + token, "Bearer", "Bearer " + token + " extra", "Bearer alpop_wrong"} {
		r, _ := http.NewRequest(http.MethodPost, "/v1/ops/trace", nil)
		r.Header.Set("Authorization", authz)
		if name, ok := a.authenticate(r); ok {
			t.Errorf("%q accepted as %q", authz, name)
		}
	}
}
