package signin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/alpd-project/alpd/internal/alp"
	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// flowState is what the sign-in cookie carries between /signin and the
// callback.
type flowState struct {
	Tenant   string    `json:"t"`
	State    string    `json:"s"`
	Verifier string    `json:"v"`
	Nonce    string    `json:"n"`
	Return   string    `json:"r"`
	Fresh    bool      `json:"f,omitempty"`
	Created  time.Time `json:"c"`
}

const (
	maxReturnLen    = 2048
	maxLoginHintLen = 256
	stateLen        = 26 // len(rand.Text())
)

func setNoStore(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
}

// serveSignIn: GET /signin?tenant=T&return=/path[&fresh=1][&login_hint=…].
func (s *Service) serveSignIn(w http.ResponseWriter, r *http.Request) {
	setNoStore(w)
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		httpjson.WriteError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use GET"))
		return
	}
	q := r.URL.Query()
	name := q.Get("tenant")
	if t, err := alp.ParseTenant(name); err == nil {
		name = string(t) // any case finds the tenant; a malformed name finds none
	}
	if name == "" {
		name = s.singleTenant()
		if name == "" {
			httpjson.WriteError(w, newError(http.StatusBadRequest, CodeTenantRequired, "say which organization to sign in with: ?tenant=<domain>"))
			return
		}
	}
	t, ok := s.tenants[name]
	if !ok {
		httpjson.WriteError(w, newError(http.StatusNotFound, CodeUnknownTenant, fmt.Sprintf("tenant %q is not served here", name)))
		return
	}
	ret, err := SafeReturnPath(q.Get("return"))
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	fresh := false
	switch q.Get("fresh") {
	case "", "0", "false":
	case "1", "true":
		fresh = true
	default:
		httpjson.WriteError(w, newError(http.StatusBadRequest, CodeInvalidRequest, "fresh must be 1 or 0"))
		return
	}
	hint := q.Get("login_hint")
	if len(hint) > maxLoginHintLen || strings.ContainsFunc(hint, unicode.IsControl) {
		httpjson.WriteError(w, newError(http.StatusBadRequest, CodeInvalidRequest, "login_hint is too long or has control characters"))
		return
	}

	f := flowState{
		Tenant:   t.Tenant,
		State:    rand.Text(),
		Verifier: oauth2.GenerateVerifier(),
		Nonce:    rand.Text(),
		Return:   ret,
		Fresh:    fresh,
		Created:  s.now(),
	}
	cookieName := flowCookiePrefix + f.State
	enc, err := s.flowCodec.Encode(cookieName, f)
	if err != nil {
		s.log.Error("signin: encode sign-in cookie", "tenant", t.Tenant, "err", err)
		httpjson.WriteError(w, newError(http.StatusInternalServerError, CodeInternal, "could not start the sign-in"))
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    enc,
		Path:     PathCallback + url.PathEscape(t.Tenant),
		MaxAge:   int(flowTTL / time.Second),
		Secure:   s.secure,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	})

	opts := []rp.AuthURLOpt{
		rp.WithCodeChallenge(oidc.NewSHACodeChallenge(f.Verifier)),
		rp.AuthURLOpt(rp.WithURLParam("nonce", f.Nonce)),
	}
	if hint != "" {
		opts = append(opts, rp.AuthURLOpt(rp.WithURLParam("login_hint", hint)))
	}
	if fresh {
		opts = append(opts, rp.AuthURLOpt(rp.WithURLParam("max_age", "0")), rp.WithPrompt(oidc.PromptLogin))
	}
	s.log.Debug("signin: started", "tenant", t.Tenant, "fresh", fresh)
	http.Redirect(w, r, rp.AuthURL(f.State, t.rp, opts...), http.StatusFound)
}

// serveCallback: GET /signin/callback/{tenant}?code=…&state=… (or
// ?error=…&state=…).
func (s *Service) serveCallback(w http.ResponseWriter, r *http.Request) {
	setNoStore(w)
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		httpjson.WriteError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use GET"))
		return
	}
	name := r.PathValue("tenant")
	t, ok := s.tenants[name]
	if !ok {
		httpjson.WriteError(w, newError(http.StatusNotFound, CodeUnknownTenant, fmt.Sprintf("tenant %q is not served here", name)))
		return
	}
	f, err := s.takeFlow(w, r, t)
	if err != nil {
		s.log.Info("signin: callback refused", "tenant", t.Tenant, "code", errCode(err))
		httpjson.WriteError(w, err)
		return
	}
	sess, err := s.complete(r.Context(), r, t, f)
	if err != nil {
		s.log.Warn("signin: sign-in failed", "tenant", t.Tenant, "fresh", f.Fresh, "code", errCode(err), "err", err)
		httpjson.WriteError(w, err)
		return
	}
	if err := s.setSession(w, sess); err != nil {
		s.log.Error("signin: session cookie", "tenant", t.Tenant, "person_id", sess.PersonID, "err", err)
		httpjson.WriteError(w, err)
		return
	}
	s.log.Info("signin: signed in", "tenant", t.Tenant, "person_id", sess.PersonID, "fresh", f.Fresh)
	// The return path was checked at /signin and is checked again here.
	ret, err := SafeReturnPath(f.Return)
	if err != nil {
		ret = "/"
	}
	http.Redirect(w, r, ret, http.StatusSeeOther)
}

// takeFlow reads and deletes the sign-in cookie bound to ?state.
func (s *Service) takeFlow(w http.ResponseWriter, r *http.Request, t *tenant) (*flowState, error) {
	invalid := func(msg string) error {
		return newError(http.StatusBadRequest, CodeStateInvalid, msg+"; start the sign-in again")
	}
	state := r.URL.Query().Get("state")
	if len(state) != stateLen || strings.ContainsFunc(state, func(c rune) bool {
		return !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7')
	}) {
		return nil, invalid("missing or malformed state")
	}
	cookieName := flowCookiePrefix + state
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil, invalid("no sign-in in progress in this browser for this state (expired, already used, or started elsewhere)")
	}
	// One attempt per sign-in: the cookie is gone whatever happens next.
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: "", Path: PathCallback + url.PathEscape(t.Tenant), MaxAge: -1,
		Secure: s.secure, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	var f flowState
	if err := s.flowCodec.Decode(cookieName, c.Value, &f); err != nil {
		return nil, invalid("the sign-in cookie is invalid or expired")
	}
	if subtle.ConstantTimeCompare([]byte(f.State), []byte(state)) != 1 || f.Tenant != t.Tenant {
		return nil, invalid("the sign-in cookie does not match this callback")
	}
	if age := s.now().Sub(f.Created); age > flowTTL || age < -clockSkew {
		return nil, invalid("the sign-in took too long")
	}
	return &f, nil
}

// complete finishes a sign-in whose flow cookie checked out: IdP errors,
// code exchange, ID token checks, address, binding, refresh token.
func (s *Service) complete(ctx context.Context, r *http.Request, t *tenant, f *flowState) (*Session, error) {
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		return nil, idpRedirectError(e, q.Get("error_description"))
	}
	code := q.Get("code")
	if code == "" {
		return nil, newError(http.StatusBadRequest, CodeCodeMissing, "the IdP's answer has neither a code nor an error")
	}

	ctx = context.WithValue(ctx, nonceKey{}, f.Nonce)
	tokens, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, code, t.rp, rp.WithCodeVerifier(f.Verifier))
	if err != nil {
		return nil, exchangeError(err)
	}
	claims := tokens.IDTokenClaims
	if claims == nil {
		return nil, newError(http.StatusBadGateway, CodeIDTokenMissing, "the IdP returned no ID token")
	}

	if t.TenantID != "" {
		if tid, _ := claims.Claims["tid"].(string); tid != t.TenantID {
			return nil, newError(http.StatusForbidden, CodeTenantMismatch,
				fmt.Sprintf("the ID token is not from tenant %s's organization (tenant id does not match)", t.Tenant))
		}
	}

	now := s.now()
	authTime := claims.GetAuthTime()
	if f.Fresh {
		switch {
		case authTime.IsZero():
			return nil, newError(http.StatusUnauthorized, CodeNotFresh, "the IdP did not report when the person authenticated (auth_time)")
		case now.Sub(authTime) > s.cfg.FreshMaxAge,
			authTime.Before(f.Created.Truncate(time.Second).Add(-clockSkew)):
			return nil, newError(http.StatusUnauthorized, CodeNotFresh, "the IdP did not authenticate the person again; a fresh sign-in is required")
		case authTime.After(now.Add(clockSkew)):
			return nil, newError(http.StatusUnauthorized, CodeNotFresh, "auth_time is in the future")
		}
	}

	address, err := t.resolveAddress(claims)
	if err != nil {
		return nil, err
	}
	roles := t.roles(claims)

	if tokens.RefreshToken == "" {
		return nil, newError(http.StatusBadGateway, CodeNoOfflineAccess, "the IdP did not grant offline access (no refresh token for scope offline_access)")
	}

	personID, err := s.binder.BindPerson(ctx, t.Tenant, t.Issuer, claims.Subject, address, roles)
	if err != nil {
		return nil, wrapDependency(err, CodeBindFailed, "could not bind the person")
	}
	if personID == "" {
		return nil, newError(http.StatusInternalServerError, CodeBindFailed, "could not bind the person")
	}
	grant := IdPGrant{RefreshToken: tokens.RefreshToken, Nonce: f.Nonce, Subject: claims.Subject}
	if err := s.keeper.KeepRefreshToken(ctx, t.Tenant, personID, grant); err != nil {
		return nil, wrapDependency(err, CodeRefreshKeepFailed, "could not store the IdP refresh token")
	}

	sess := &Session{
		ID:       rand.Text(),
		Tenant:   t.Tenant,
		PersonID: personID,
		Address:  address,
		Roles:    roles,
		AuthTime: authTime.UTC(),
		Issued:   now.UTC(),
		Expires:  now.Add(s.cfg.SessionTTL).UTC(),
	}
	if err := s.cfg.Sessions.CreateSession(ctx, sess); err != nil {
		return nil, &wrappedError{e: &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeSessionsUnavailable,
			Message: "the session could not be recorded; try signing in again shortly", RetryAfter: 5}, cause: err}
	}
	return sess, nil
}

// wrapDependency keeps an *httpjson.Error from a Binder or RefreshKeeper and turns
// anything else into a 500 (the cause is logged, not sent).
func wrapDependency(err error, code, msg string) error {
	var e *httpjson.Error
	if errors.As(err, &e) {
		return e
	}
	return &wrappedError{e: newError(http.StatusInternalServerError, code, msg), cause: err}
}

// wrappedError answers as its *httpjson.Error but logs with its cause.
type wrappedError struct {
	e     *httpjson.Error
	cause error
}

func (w *wrappedError) Error() string   { return w.e.Error() + ": " + w.cause.Error() }
func (w *wrappedError) Unwrap() []error { return []error{w.e, w.cause} }

func errCode(err error) string {
	var e *httpjson.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// idpRedirectError maps an error the IdP sent to the redirect URI.
func idpRedirectError(code, desc string) error {
	code = sanitize(code, 64)
	desc = sanitize(desc, 200)
	msg := "the identity provider refused the sign-in: " + code
	if desc != "" {
		msg += " (" + desc + ")"
	}
	switch code {
	case "access_denied":
		return newError(http.StatusForbidden, CodeIdPDenied, msg)
	case "login_required", "interaction_required", "consent_required", "account_selection_required":
		return newError(http.StatusUnauthorized, CodeIdPLoginRequired, msg)
	case "server_error", "temporarily_unavailable":
		return &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeIdPUnavailable, Message: msg, RetryAfter: 5}
	default:
		return newError(http.StatusBadRequest, CodeIdPError, msg)
	}
}

// exchangeError classifies a failed code exchange or ID token check.
func exchangeError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		oauthCode := sanitize(re.ErrorCode, 64)
		if status >= 500 || oauthCode == "temporarily_unavailable" || oauthCode == "server_error" {
			e := &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeIdPUnavailable,
				Message: fmt.Sprintf("the identity provider is unavailable (token endpoint answered %d %s); try again shortly", status, oauthCode), RetryAfter: 5}
			if re.Response != nil {
				if ra, err := strconv.Atoi(re.Response.Header.Get("Retry-After")); err == nil && ra > 0 && ra <= 3600 {
					e.RetryAfter = ra
				}
			}
			return &wrappedError{e: e, cause: errors.New("token endpoint: HTTP " + strconv.Itoa(status) + " " + oauthCode)}
		}
		return &wrappedError{
			e:     newError(http.StatusBadRequest, CodeExchangeFailed, fmt.Sprintf("the identity provider refused the authorization code (%s); start the sign-in again", oauthCode)),
			cause: errors.New("token endpoint: HTTP " + strconv.Itoa(status) + " " + oauthCode),
		}
	}
	if errors.Is(err, rp.ErrMissingIDToken) {
		return newError(http.StatusBadGateway, CodeIDTokenMissing, "the IdP returned no ID token")
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return &wrappedError{
			e:     newError(http.StatusBadGateway, CodeIdPUnreachable, "the identity provider could not be reached; try again shortly"),
			cause: err,
		}
	}
	return &wrappedError{
		e:     newError(http.StatusBadGateway, CodeIDTokenInvalid, "the IdP's ID token failed verification"),
		cause: err,
	}
}

// sanitize keeps printable ASCII and cuts to n bytes.
func sanitize(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// SafeReturnPath checks a post-sign-in return target: it must be a
// same-origin absolute path ("/approvals?x=1"), never a scheme-relative
// ("//evil"), absolute ("https://…") or backslashed URL. "" means "/".
func SafeReturnPath(p string) (string, error) {
	if p == "" {
		return "/", nil
	}
	bad := newError(http.StatusBadRequest, CodeInvalidReturn, "return must be a path on this site, like /approvals")
	if len(p) > maxReturnLen || p[0] != '/' || strings.HasPrefix(p, "//") ||
		strings.ContainsAny(p, "\\") || strings.ContainsFunc(p, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		return "", bad
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "", bad
	}
	return p, nil
}
