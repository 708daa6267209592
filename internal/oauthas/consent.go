package oauthas

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/identitystore"
	"github.com/alpd-project/alpd/internal/signin"
)

// PathConsent is where a person decides whether a consumer agent may act
// for them (relative to /oauth/<tenant>).
const PathConsent = "/consent"

// consentTTL bounds how long a consent ticket carries from the consent form
// back to the authorization endpoint.
const consentTTL = 5 * time.Minute

// Consent: an agent whose client nobody vetted (dynamic registration, a
// metadata document) gets a token only after the person approved it on a
// page of their own broker. Without it, one click on a crafted link would
// hand a signed-in person's token to whoever registered the redirect URI.
// Company clients (registered by the tenant's admin) and attested vendor
// clients skip it: the organization approved them.
func needsConsent(c identitystore.Client) bool {
	return c.Class().String() != "TRUST_CLASS_COMPANY"
}

// consentTicket binds an approval to the person, client, redirect URI and
// PKCE challenge of one authorization request, until exp.
func (s *Server) consentTicket(tenant, person, client, redirect, challenge string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	m := hmac.New(sha256.New, s.cfg.ConsentKey)
	for _, p := range []string{"alpd consent v1", tenant, person, client, redirect, challenge, e} {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return e + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Server) validConsent(ticket, tenant, person, client, redirect, challenge string) bool {
	e, _, ok := strings.Cut(ticket, ".")
	sec, err := strconv.ParseInt(e, 10, 64)
	if !ok || err != nil || s.now().After(time.Unix(sec, 0)) {
		return false
	}
	want := s.consentTicket(tenant, person, client, redirect, challenge, time.Unix(sec, 0))
	return hmac.Equal([]byte(ticket), []byte(want))
}

var consentPage = template.Must(template.New("consent").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Allow an agent?</title></head>
<body>
<h1>Allow {{.Name}} to act for you?</h1>
<p>Signed in as <strong>{{.Address}}</strong>.</p>
<p>The agent <strong>{{.Name}}</strong> ({{.ClientID}}) asks to use your broker with these permissions:
{{range .Scopes}}<code>{{.}}</code> {{end}}. It will be sent back to <code>{{.RedirectHost}}</code>.</p>
<p>It is a consumer agent: your organization has not vetted it, so it never sees confidential fields.</p>
<form method="post">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<input type="hidden" name="request" value="{{.Request}}">
<button name="decision" value="allow">Allow</button>
<button name="decision" value="deny">Deny</button>
</form>
</body></html>
`))

// consentHandler serves the consent page of tenant t (GET shows it, POST
// decides). The authorization request travels in "request" unchanged and
// is validated again by the authorization endpoint.
func (t *tenantAS) consentHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := t.s.deps.Sessions.Session(r)
		if err != nil || sess == nil || sess.Tenant != t.tenant {
			signin.WriteError(w, signin.ErrNoSession)
			return
		}
		var raw string
		switch r.Method {
		case http.MethodGet:
			raw = r.URL.RawQuery
		case http.MethodPost:
			if err := t.s.deps.Sessions.CheckCSRF(r); err != nil {
				signin.WriteError(w, err)
				return
			}
			raw = r.PostFormValue("request")
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		q, err := url.ParseQuery(raw)
		if err != nil {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		c, err := t.lookupClient(r.Context(), q.Get("client_id"))
		redirect := q.Get("redirect_uri")
		if err != nil || !slices.Contains(c.RedirectURIs, redirect) {
			// Never redirect to an unverified URI.
			http.Error(w, "unknown client or redirect URI", http.StatusBadRequest)
			return
		}
		if r.Method == http.MethodGet {
			ru, _ := url.Parse(redirect)
			name := c.Name
			if name == "" {
				name = c.ID
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("X-Frame-Options", "DENY")
			w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
			_ = consentPage.Execute(w, map[string]any{
				"Name": name, "ClientID": c.ID, "Address": sess.Address, "Scopes": strings.Fields(q.Get("scope")),
				"RedirectHost": ru.Host, "CSRF": sess.CSRFToken(), "Request": raw,
			})
			return
		}
		if r.PostFormValue("decision") != "allow" {
			u, _ := url.Parse(redirect)
			back := u.Query()
			back.Set("error", "access_denied")
			back.Set("error_description", "the person did not allow this agent")
			if st := q.Get("state"); st != "" {
				back.Set("state", st)
			}
			back.Set("iss", t.issuer)
			u.RawQuery = back.Encode()
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		q.Set("consent", t.s.consentTicket(t.tenant, sess.PersonID, c.ID, redirect, q.Get("code_challenge"), t.s.now().Add(consentTTL)))
		http.Redirect(w, r, PathPrefix+t.tenant+PathAuthorize+"?"+q.Encode(), http.StatusSeeOther)
	})
}

// errNoConsentKey: Config.ConsentKey is required.
var errNoConsentKey = errors.New("oauthas: Config.ConsentKey (at least 32 bytes, shared by replicas) is required")
