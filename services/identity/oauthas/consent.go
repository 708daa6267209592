package oauthas

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/alpd-project/alpd/internal/httpjson"
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

// A consent ticket carries a person's "allow" from the consent form back to
// the authorization endpoint: "<id>.<expiry>.<mac>", where id is 128
// random bits and mac an HMAC (ConsentKey, shared by replicas) over the
// tenant, the person, their session, id, expiry and a digest of every
// parameter of the authorization request but the ticket itself (client_id,
// redirect_uri, scope, state, code_challenge and its method, resource,
// nonce, response_type, prompt, ...). So the ticket approves exactly the
// request the person saw, not a wider or different one, and only in the
// session that approved it. It is good once: the authorization endpoint
// claims its id in the code bucket (Deps.Codes, shared by replicas) before
// it issues a code, and a second claim fails.
const (
	consentTicketVersion = "alpd consent v2"
	// consentIDBytes: the random part of a ticket.
	consentIDBytes = 16
)

// A ticket must be remembered as used for as long as it is valid: the code
// bucket keeps an entry for DefaultCodesRetention, so consentTTL must be
// shorter (this constant does not compile otherwise).
const _ = uint(DefaultCodesRetention - consentTTL)

// Why an authorization request's consent ticket is not accepted.
type consentProblem int

const (
	consentValid    consentProblem = iota
	consentMissing                 // no ticket: ask the person
	consentExpired                 // valid but too old: ask the person again
	consentMismatch                // not made by us for this request, person and session
)

// Error codes of refused consent tickets (OAuth error responses answered by
// the authorization endpoint itself, never redirected: no code is issued
// and nothing goes to the client).
const (
	// CodeConsentMismatch: the ticket was not issued for this request (a
	// parameter changed since the person approved it), person or session,
	// or it is forged.
	CodeConsentMismatch = "consent_mismatch"
	// CodeConsentReplayed: the ticket was already used for an
	// authorization.
	CodeConsentReplayed = "consent_replayed"
)

// consentDigest is the SHA-256 of the request's parameters without the
// ticket, in url.Values.Encode's canonical form (sorted by name, values in
// their order).
func consentDigest(form url.Values) []byte {
	rest := url.Values{}
	for k, v := range form {
		if k != consentParam {
			rest[k] = v
		}
	}
	d := sha256.Sum256([]byte(rest.Encode()))
	return d[:]
}

// consentParam is the authorization request parameter carrying the ticket.
const consentParam = "consent"

func (s *Server) consentMAC(tenant, person, session, id, exp string, digest []byte) string {
	m := hmac.New(sha256.New, s.cfg.ConsentKey)
	for _, p := range [][]byte{[]byte(consentTicketVersion), []byte(tenant), []byte(person), []byte(session), []byte(id), []byte(exp), digest} {
		m.Write([]byte(strconv.Itoa(len(p))))
		m.Write([]byte{':'})
		m.Write(p)
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// consentTicket approves the authorization request form for the person in
// session sess, until exp.
func (s *Server) consentTicket(tenant string, sess *signin.Session, form url.Values, exp time.Time) string {
	var b [consentIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (Go 1.24+)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	e := strconv.FormatInt(exp.Unix(), 10)
	return id + "." + e + "." + s.consentMAC(tenant, sess.PersonID, sess.ID, id, e, consentDigest(form))
}

// checkConsent checks the ticket in the authorization request form; for a
// valid one it returns its id, to be claimed (claimConsent).
func (s *Server) checkConsent(tenant string, sess *signin.Session, form url.Values) (string, consentProblem) {
	vals := form[consentParam]
	if len(vals) == 0 || vals[0] == "" {
		return "", consentMissing
	}
	parts := strings.Split(vals[0], ".")
	if len(vals) != 1 || len(parts) != 3 || len(parts[0]) != base64.RawURLEncoding.EncodedLen(consentIDBytes) || !allB64URL(parts[0]) {
		return "", consentMismatch
	}
	id, e, mac := parts[0], parts[1], parts[2]
	sec, err := strconv.ParseInt(e, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != e {
		return "", consentMismatch
	}
	want := s.consentMAC(tenant, sess.PersonID, sess.ID, id, e, consentDigest(form))
	if !hmac.Equal([]byte(mac), []byte(want)) {
		return "", consentMismatch
	}
	if !s.now().Before(time.Unix(sec, 0)) {
		return "", consentExpired
	}
	return id, consentValid
}

// errConsentReplayed: the ticket was claimed before.
var errConsentReplayed = errors.New("oauthas: consent ticket already used")

// claimConsent marks ticket id used, on every replica (a create in the code
// bucket, which fails if the key exists). It fails with errConsentReplayed
// if the ticket was used before.
func (s *Server) claimConsent(ctx context.Context, tenant, id string, exp time.Time) error {
	v := fmt.Appendf(nil, `{"tenant":%q,"expires":%q}`, tenant, exp.UTC().Format(time.RFC3339))
	_, err := s.codes.kv.Create(ctx, "t_"+id, v)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return errConsentReplayed
	}
	if err != nil {
		return fmt.Errorf("oauthas: claiming a consent ticket: %w", err)
	}
	return nil
}

func allB64URL(s string) bool {
	for i := 0; i < len(s); i++ {
		if !b64urlChar(s[i]) {
			return false
		}
	}
	return true
}

// consentMismatched and consentReplayed answer a ticket that is not
// accepted: an error of the authorization endpoint itself (status 400, op
// renders it), never a redirect to the client.
func consentMismatched() error {
	e := oidc.ErrAccessDenied().WithDescription("the consent does not match this authorization request, person or session; start again from the agent")
	e.ErrorType = CodeConsentMismatch
	return op.NewStatusError(e, http.StatusBadRequest)
}

func consentReplayed() error {
	e := oidc.ErrAccessDenied().WithDescription("this consent was already used; start again from the agent")
	e.ErrorType = CodeConsentReplayed
	return op.NewStatusError(e, http.StatusBadRequest)
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
			httpjson.WriteError(w, signin.ErrNoSession)
			return
		}
		var raw string
		switch r.Method {
		case http.MethodGet:
			raw = r.URL.RawQuery
		case http.MethodPost:
			if err := t.s.deps.Sessions.CheckCSRF(r); err != nil {
				httpjson.WriteError(w, err)
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
		q.Del(consentParam)
		q.Set(consentParam, t.s.consentTicket(t.tenant, sess, q, t.s.now().Add(consentTTL)))
		http.Redirect(w, r, PathPrefix+t.tenant+PathAuthorize+"?"+q.Encode(), http.StatusSeeOther)
	})
}

// errNoConsentKey: Config.ConsentKey is required.
var errNoConsentKey = errors.New("oauthas: Config.ConsentKey (at least 32 bytes, shared by replicas) is required")
