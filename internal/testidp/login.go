package testidp

import (
	"crypto/subtle"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

var loginTmpl = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>testidp sign-in</title>
<style>body{font-family:sans-serif;max-width:24rem;margin:4rem auto}label,input,button{display:block;width:100%;margin:.3rem 0}.err{color:#b00}</style>
</head><body>
<h1>Sign in</h1>
<p>testidp &mdash; test identity provider. Client: <code>{{.ClientID}}</code></p>
{{if .Error}}<p class="err" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="{{.Action}}">
<input type="hidden" name="authRequestID" value="{{.AuthRequestID}}">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="username">Username</label><input id="username" name="username" value="{{.Username}}" autocomplete="username" required>
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password">
<button type="submit">Sign in</button>
</form></body></html>
`))

type loginPage struct {
	Action, AuthRequestID, CSRF, Username, Error, ClientID string
}

func (idp *IdP) serveLogin(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'")
	switch r.Method {
	case http.MethodGet:
		idp.loginGet(w, r)
	case http.MethodPost:
		idp.loginPost(w, r)
	default:
		h.Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// loginGet is where the authorization endpoint sends the browser. In order:
// reuse a valid SSO session, answer prompt=none, AutoLogin by login_hint,
// or show the form.
func (idp *IdP) loginGet(w http.ResponseWriter, r *http.Request) {
	ar, err := idp.store.lookupLogin(r.URL.Query().Get(authRequestParam))
	if err != nil {
		http.Error(w, "testidp: unknown or expired sign-in request", http.StatusBadRequest)
		return
	}
	if ar.done {
		http.Redirect(w, r, idp.callbackURL(ar.id), http.StatusFound)
		return
	}
	if se := idp.currentSession(r); se != nil && idp.sessionSatisfies(ar, se) {
		idp.complete(w, r, ar, se, http.StatusFound)
		return
	}
	if slices.Contains(ar.prompt, oidc.PromptNone) {
		op.AuthRequestError(w, r, ar, oidc.ErrLoginRequired(), idp.provider)
		return
	}
	if idp.cfg.AutoLogin && ar.loginHint != "" {
		u, found, enabled := idp.store.userByLogin(ar.loginHint)
		if !found || !enabled {
			idp.log.Info("testidp: auto-login denied", "login_hint", ar.loginHint, "known", found)
			op.AuthRequestError(w, r, ar, oidc.ErrAccessDenied().WithDescription("user unknown or disabled"), idp.provider)
			return
		}
		idp.signIn(w, r, ar, u.Subject, http.StatusFound)
		return
	}
	idp.renderLogin(w, http.StatusOK, ar, ar.loginHint, "")
}

// sessionSatisfies reports whether an existing SSO session may answer the
// request without a fresh authentication.
func (idp *IdP) sessionSatisfies(ar *authRequest, se *session) bool {
	if slices.Contains(ar.prompt, oidc.PromptLogin) {
		return false
	}
	if ar.maxAge != nil {
		// max_age=0 (also set by op for prompt=login) always re-authenticates.
		if *ar.maxAge == 0 || time.Since(se.authTime) > time.Duration(*ar.maxAge)*time.Second {
			return false
		}
	}
	if ar.hintSubject != "" && ar.hintSubject != se.subject {
		return false
	}
	if ar.loginHint != "" {
		u, found, _ := idp.store.userByLogin(ar.loginHint)
		if !found || u.Subject != se.subject {
			return false
		}
	}
	return true
}

func (idp *IdP) loginPost(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "testidp: bad form", http.StatusBadRequest)
		return
	}
	ar, err := idp.store.lookupLogin(r.PostForm.Get(authRequestParam))
	if err != nil {
		http.Error(w, "testidp: unknown or expired sign-in request", http.StatusBadRequest)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(ar.csrf)) != 1 {
		http.Error(w, "testidp: invalid or missing CSRF token", http.StatusForbidden)
		return
	}
	if ar.done {
		http.Error(w, "testidp: sign-in request already completed", http.StatusBadRequest)
		return
	}
	username := r.PostForm.Get("username")
	u, ok, enabled := idp.store.checkPassword(username, r.PostForm.Get("password"))
	switch {
	case !ok:
		idp.log.Info("testidp: login failed", "username", username)
		idp.renderLogin(w, http.StatusUnauthorized, ar, username, "Invalid username or password.")
		return
	case !enabled:
		idp.log.Info("testidp: login of disabled user", "username", username)
		idp.renderLogin(w, http.StatusForbidden, ar, username, "This account is disabled.")
		return
	}
	idp.signIn(w, r, ar, u.Subject, http.StatusSeeOther)
}

// signIn starts a fresh SSO session (auth_time = now) and completes ar.
func (idp *IdP) signIn(w http.ResponseWriter, r *http.Request, ar *authRequest, subject string, status int) {
	se, err := idp.store.newSession(subject, []string{"pwd"})
	if err != nil {
		op.AuthRequestError(w, r, ar, oidc.ErrAccessDenied().WithDescription("user unknown or disabled"), idp.provider)
		return
	}
	cookiePath := "/"
	if u, err := url.Parse(idp.Issuer()); err == nil && u.Path != "" {
		cookiePath = u.Path
	}
	http.SetCookie(w, &http.Cookie{
		Name:     idp.cookieName,
		Value:    se.id,
		Path:     cookiePath,
		Expires:  se.expires,
		HttpOnly: true,
		Secure:   strings.HasPrefix(idp.Issuer(), "https://"),
		SameSite: http.SameSiteLaxMode,
	})
	idp.log.Info("testidp: signed in", "sub", subject, "client_id", ar.clientID)
	idp.complete(w, r, ar, se, status)
}

// complete marks ar authenticated by se and sends the browser to op's
// callback, which issues the code.
func (idp *IdP) complete(w http.ResponseWriter, r *http.Request, ar *authRequest, se *session, status int) {
	if err := idp.store.completeLogin(ar.id, se); err != nil {
		op.AuthRequestError(w, r, ar, oidc.ErrAccessDenied().WithDescription("sign-in could not be completed"), idp.provider)
		return
	}
	http.Redirect(w, r, idp.callbackURL(ar.id), status)
}

func (idp *IdP) currentSession(r *http.Request) *session {
	c, err := r.Cookie(idp.cookieName)
	if err != nil {
		return nil
	}
	se, ok := idp.store.lookupSession(c.Value)
	if !ok {
		return nil
	}
	return se
}

func (idp *IdP) callbackURL(id string) string {
	return idp.provider.AuthorizationEndpoint().Absolute(idp.Issuer()) + "/callback?id=" + url.QueryEscape(id)
}

func (idp *IdP) renderLogin(w http.ResponseWriter, status int, ar *authRequest, username, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = loginTmpl.Execute(w, loginPage{
		Action:        idp.Issuer() + loginPath,
		AuthRequestID: ar.id,
		CSRF:          ar.csrf,
		Username:      username,
		Error:         msg,
		ClientID:      ar.clientID,
	})
}
