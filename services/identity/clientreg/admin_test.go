package clientreg_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/services/identity/clientreg"
)

func TestAdminRegistersConfidentialClient(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, nil)
	alice := w.signIn("alice")

	a := w.do(alice, http.MethodPost, "/v1/admin/clients", clientreg.AdminClientRequest{
		Name: "Payroll agent", RedirectURIs: []string{"https://payroll.example.org/oauth/cb"},
	}, reqOpt{})
	if a.status != http.StatusCreated {
		t.Fatalf("%d %s", a.status, a.body)
	}
	if a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", a.header.Get("Cache-Control"))
	}
	c := decode[clientreg.AdminClient](t, a)
	if !strings.HasPrefix(c.ClientSecret, clientreg.ClientSecretPrefix) || len(c.ClientSecret) != len(clientreg.ClientSecretPrefix)+43 {
		t.Fatalf("client_secret %q", c.ClientSecret)
	}
	if c.Kind != "confidential" || c.Class != "company" || c.RegisteredBy != alice.personID ||
		c.TokenEndpointAuthMethod != "client_secret_basic" || c.Name != "Payroll agent" || !strings.HasPrefix(c.ClientID, "cc_") {
		t.Errorf("answer %+v", c)
	}
	stored, err := e.store.Client(tenant, c.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Kind != alpv1.ClientKind_CLIENT_KIND_CONFIDENTIAL || stored.RegisteredBy != alice.personID ||
		!stored.SecretSHA256.Equal(identitystore.HashSecret(c.ClientSecret)) || stored.Class() != alpv1.TrustClass_TRUST_CLASS_COMPANY {
		t.Errorf("stored %+v", stored)
	}
	// Only the hash is on the stream.
	if e.streamContains(t, []byte(c.ClientSecret)) {
		t.Error("the client secret is on the identity stream")
	}
	secretPart := strings.TrimPrefix(c.ClientSecret, clientreg.ClientSecretPrefix)
	if e.streamContains(t, []byte(secretPart)) {
		t.Error("the secret's random part is on the identity stream")
	}
	h := identitystore.HashSecret(c.ClientSecret)
	if !e.streamContains(t, h[:]) {
		t.Error("the secret's hash is not on the identity stream (is the scan working?)")
	}

	// Two registrations, two secrets.
	a = w.do(alice, http.MethodPost, "/v1/admin/clients", map[string]any{
		"name": "Second", "redirect_uris": []string{"https://x.example.org/cb"}, "token_endpoint_auth_method": "client_secret_post",
	}, reqOpt{})
	c2 := decode[clientreg.AdminClient](t, a)
	if a.status != http.StatusCreated || c2.ClientSecret == c.ClientSecret || c2.ClientID == c.ClientID || c2.TokenEndpointAuthMethod != "client_secret_post" {
		t.Fatalf("%d %s", a.status, a.body)
	}
}

func TestAdminRefusals(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, nil)
	alice, bob := w.signIn("alice"), w.signIn("bob")
	body := clientreg.AdminClientRequest{Name: "x", RedirectURIs: []string{"https://x.example.org/cb"}}

	wantErr(t, w.do(bob, http.MethodPost, "/v1/admin/clients", body, reqOpt{}), http.StatusForbidden, clientreg.CodeForbidden)
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients", body, reqOpt{noCSRF: true}), http.StatusForbidden, "csrf_token_invalid")
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients", body, reqOpt{origin: "https://evil.example"}), http.StatusForbidden, "csrf_origin_mismatch")
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients", body, reqOpt{origin: "-"}), http.StatusForbidden, "csrf_origin_missing")
	wantErr(t, w.do(anonymous(), http.MethodPost, "/v1/admin/clients", body, reqOpt{}), http.StatusUnauthorized, "signin_required")
	// Bob with alice's CSRF token (a token of another session) is refused.
	stolen := *bob
	stolen.csrf = alice.csrf
	wantErr(t, w.do(&stolen, http.MethodPost, "/v1/admin/clients", body, reqOpt{}), http.StatusForbidden, "csrf_token_invalid")
	a := w.do(alice, http.MethodGet, "/v1/admin/clients", nil, reqOpt{})
	wantErr(t, a, http.StatusMethodNotAllowed, clientreg.CodeMethodNotAllowed)

	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"no name", map[string]any{"redirect_uris": []string{"https://x.example.org/cb"}}, 400, "invalid_client_metadata"},
		{"bad redirect", map[string]any{"name": "x", "redirect_uris": []string{"http://x.example.org/cb"}}, 400, "invalid_redirect_uri"},
		{"no redirect", map[string]any{"name": "x"}, 400, "invalid_redirect_uri"},
		{"attestation on confidential", map[string]any{"name": "x", "redirect_uris": []string{"https://x.example.org/cb"}, "vendor_attestation": "v"}, 400, "invalid_client_metadata"},
		{"client id on confidential", map[string]any{"name": "x", "redirect_uris": []string{"https://x.example.org/cb"}, "client_id": "mine"}, 400, "invalid_client_metadata"},
		{"bad method", map[string]any{"name": "x", "redirect_uris": []string{"https://x.example.org/cb"}, "token_endpoint_auth_method": "tls_client_auth"}, 400, "invalid_client_metadata"},
		{"unknown member", map[string]any{"name": "x", "redirect_uris": []string{"https://x.example.org/cb"}, "redirect_uri": "typo"}, 400, clientreg.CodeInvalidBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients", tc.body, reqOpt{}), tc.status, tc.code)
		})
	}
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients", nil, reqOpt{raw: []byte("name=x"), contentType: "application/x-www-form-urlencoded"}),
		http.StatusUnsupportedMediaType, clientreg.CodeUnsupportedMedia)
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients", nil, reqOpt{raw: []byte(`{"name":"` + strings.Repeat("x", 70<<10) + `"}`)}),
		http.StatusRequestEntityTooLarge, clientreg.CodeBodyTooLarge)
}

func TestAdminVendorClientAndAttestation(t *testing.T) {
	e := newRig(t)
	w := newWeb(t, e, nil)
	alice, bob := w.signIn("alice"), w.signIn("bob")
	ctx := ctxT(t)

	// A vendor's published public client, attested at registration.
	a := w.do(alice, http.MethodPost, "/v1/admin/clients", clientreg.AdminClientRequest{
		Name: "Vendor Copilot", RedirectURIs: []string{"https://vendor.example/cb"}, TokenEndpointAuthMethod: "none",
		ClientID: "vendor-copilot", VendorAttestation: "contract 2025-17",
	}, reqOpt{})
	if a.status != http.StatusCreated {
		t.Fatalf("%d %s", a.status, a.body)
	}
	v := decode[clientreg.AdminClient](t, a)
	if v.ClientID != "vendor-copilot" || v.ClientSecret != "" || v.Kind != "public_vendor" || v.Class != "company" || v.VendorAttestation != "contract 2025-17" {
		t.Errorf("%+v", v)
	}
	// Without attestation: consumer, random id.
	a = w.do(alice, http.MethodPost, "/v1/admin/clients", map[string]any{
		"name": "Vendor App", "redirect_uris": []string{"https://vendor.example/cb"}, "token_endpoint_auth_method": "none",
	}, reqOpt{})
	v = decode[clientreg.AdminClient](t, a)
	if a.status != http.StatusCreated || !strings.HasPrefix(v.ClientID, "vnd_") || v.Class != "consumer" || strings.Contains(a.body, "client_secret") {
		t.Fatalf("%d %s", a.status, a.body)
	}

	// Bind an attestation to a dynamically registered client.
	dcr, err := e.store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: "dcr_x",
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_DCR, RedirectURIs: []string{"http://127.0.0.1/cb"}})
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/admin/clients/" + dcr.ID + "/attestation"
	wantErr(t, w.do(bob, http.MethodPost, path, clientreg.AttestationRequest{VendorAttestation: "x"}, reqOpt{}), http.StatusForbidden, clientreg.CodeForbidden)
	wantErr(t, w.do(alice, http.MethodPost, path, clientreg.AttestationRequest{VendorAttestation: "x"}, reqOpt{noCSRF: true}), http.StatusForbidden, "csrf_token_invalid")
	wantErr(t, w.do(anonymous(), http.MethodPost, path, clientreg.AttestationRequest{VendorAttestation: "x"}, reqOpt{}), http.StatusUnauthorized, "signin_required")
	wantErr(t, w.do(alice, http.MethodPost, path, clientreg.AttestationRequest{}, reqOpt{}), http.StatusBadRequest, "invalid_client_metadata")
	a = w.do(alice, http.MethodPost, path, clientreg.AttestationRequest{VendorAttestation: "reviewed by IT"}, reqOpt{})
	if a.status != http.StatusOK {
		t.Fatalf("%d %s", a.status, a.body)
	}
	v = decode[clientreg.AdminClient](t, a)
	if v.Class != "company" || v.AttestedBy != alice.personID || v.Kind != "public_dcr" {
		t.Errorf("%+v", v)
	}
	if c, _ := e.store.Client(tenant, dcr.ID); c.VendorAttestation != "reviewed by IT" || c.AttestedBy != alice.personID {
		t.Errorf("stored %+v", c)
	}

	// A metadata document client: its id is a URL, path-escaped.
	cimdID := "https://agent.example/client.json"
	if _, err := e.store.RegisterClient(ctx, identitystore.ClientSpec{Tenant: tenant, ClientID: cimdID,
		Kind: alpv1.ClientKind_CLIENT_KIND_PUBLIC_CIMD, RedirectURIs: []string{"https://agent.example/cb"}}); err != nil {
		t.Fatal(err)
	}
	a = w.do(alice, http.MethodPost, "/v1/admin/clients/"+url.PathEscape(cimdID)+"/attestation", clientreg.AttestationRequest{VendorAttestation: "ok"}, reqOpt{})
	if a.status != http.StatusOK || decode[clientreg.AdminClient](t, a).ClientID != cimdID {
		t.Fatalf("%d %s", a.status, a.body)
	}

	// Confidential clients need none; unknown clients are not found.
	a = w.do(alice, http.MethodPost, "/v1/admin/clients", clientreg.AdminClientRequest{Name: "c", RedirectURIs: []string{"https://c.example.org/cb"}}, reqOpt{})
	conf := decode[clientreg.AdminClient](t, a)
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients/"+conf.ClientID+"/attestation", clientreg.AttestationRequest{VendorAttestation: "x"}, reqOpt{}),
		http.StatusBadRequest, clientreg.CodeInvalidBody)
	wantErr(t, w.do(alice, http.MethodPost, "/v1/admin/clients/nope/attestation", clientreg.AttestationRequest{VendorAttestation: "x"}, reqOpt{}),
		http.StatusNotFound, clientreg.CodeNotFound)
	wantErr(t, w.do(alice, http.MethodGet, path, nil, reqOpt{}), http.StatusMethodNotAllowed, clientreg.CodeMethodNotAllowed)
}
