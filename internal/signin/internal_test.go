package signin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"
)

func TestRolesClaim(t *testing.T) {
	tc := &tenantConfig{TenantIdP: TenantIdP{RolesClaim: "app_roles"}}
	for _, c := range []struct {
		v    any
		want []string
	}{
		{"admin", []string{"admin"}},
		{[]any{"a", 3, "b", "a", ""}, []string{"a", "b"}},
		{nil, nil},
		{map[string]any{"x": 1}, nil},
	} {
		got := tc.roles(&oidc.IDTokenClaims{Claims: map[string]any{"app_roles": c.v}})
		if !slices.Equal(got, c.want) {
			t.Errorf("roles(%v) = %v, want %v", c.v, got, c.want)
		}
	}
}

func TestAddressClaimNotString(t *testing.T) {
	tcs, errs := normalizeTenant(TenantIdP{Tenant: "example.org", Issuer: "https://idp.example", ClientID: "c", AddressClaim: "oid"})
	if errs != nil {
		t.Fatal(errs)
	}
	_, err := tcs.resolveAddress(&oidc.IDTokenClaims{Claims: map[string]any{"oid": 42}})
	var e *httpjson.Error
	if !errors.As(err, &e) || e.Code != CodeAddressClaimFormat || e.Status != http.StatusForbidden {
		t.Fatalf("non-string claim: %v", err)
	}
	_, err = tcs.resolveAddress(&oidc.IDTokenClaims{Claims: map[string]any{"oid": "not an address@@x"}})
	if !errors.As(err, &e) || e.Code != CodeAddressClaimFormat {
		t.Fatalf("malformed address claim: %v", err)
	}
	_, err = tcs.resolveAddress(&oidc.IDTokenClaims{Claims: map[string]any{}})
	if !errors.As(err, &e) || e.Code != CodeAddressUnresolved {
		t.Fatalf("missing claim: %v", err)
	}
}

func TestErrorClassification(t *testing.T) {
	code := func(err error) (int, string) {
		var e *httpjson.Error
		if !errors.As(err, &e) {
			t.Fatalf("not an *httpjson.Error: %v", err)
		}
		return e.Status, e.Code
	}
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{&oauth2.RetrieveError{Response: &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"9"}}}, ErrorCode: "temporarily_unavailable"}, 503, CodeIdPUnavailable},
		{&oauth2.RetrieveError{Response: &http.Response{StatusCode: 502, Header: http.Header{}}}, 503, CodeIdPUnavailable},
		{&oauth2.RetrieveError{Response: &http.Response{StatusCode: 400, Header: http.Header{}}, ErrorCode: "invalid_grant"}, 400, CodeExchangeFailed},
		{fmt.Errorf("x: %w", rp.ErrMissingIDToken), 502, CodeIDTokenMissing},
		{&url.Error{Op: "Post", URL: "http://idp/token", Err: errors.New("connection refused")}, 502, CodeIdPUnreachable},
		{fmt.Errorf("%w: expected a got b", oidc.ErrIssuerInvalid), 502, CodeIDTokenInvalid},
		{fmt.Errorf("%w: nonce", oidc.ErrNonceInvalid), 502, CodeIDTokenInvalid},
	} {
		if s, cd := code(exchangeError(c.err)); s != c.status || cd != c.code {
			t.Errorf("exchangeError(%v) = %d %s, want %d %s", c.err, s, cd, c.status, c.code)
		}
	}
	var e *httpjson.Error
	if errors.As(exchangeError(&oauth2.RetrieveError{Response: &http.Response{StatusCode: 503, Header: http.Header{"Retry-After": {"9"}}}}), &e); e.RetryAfter != 9 {
		t.Errorf("Retry-After not passed on: %d", e.RetryAfter)
	}
	for _, c := range []struct {
		code   string
		status int
		want   string
	}{
		{"access_denied", 403, CodeIdPDenied},
		{"login_required", 401, CodeIdPLoginRequired},
		{"consent_required", 401, CodeIdPLoginRequired},
		{"temporarily_unavailable", 503, CodeIdPUnavailable},
		{"server_error", 503, CodeIdPUnavailable},
		{"invalid_request", 400, CodeIdPError},
	} {
		if s, cd := code(idpRedirectError(c.code, "desc\x00\nmore")); s != c.status || cd != c.want {
			t.Errorf("idpRedirectError(%s) = %d %s", c.code, s, cd)
		}
	}
	if err := idpRedirectError("access_denied", "a\r\nb"); errors.As(err, &e) && e.Message != "the identity provider refused the sign-in: access_denied (ab)" {
		t.Errorf("message %q", e.Message)
	}
}
