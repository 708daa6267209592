package signin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// Session is a signed-in person's web session, carried in the
// "alpd_session" cookie (signed and encrypted).
type Session struct {
	ID       string    `json:"id"`
	Tenant   string    `json:"tenant"`
	PersonID string    `json:"person_id"`
	Address  string    `json:"address"`
	Roles    []string  `json:"roles,omitempty"`
	AuthTime time.Time `json:"auth_time"` // when the IdP last authenticated the person; zero if it did not say
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`

	csrf string
}

// CSRFToken returns the token that state-changing forms of this session
// must carry in the field "csrf" (see CheckCSRF).
func (s *Session) CSRFToken() string { return s.csrf }

// FreshAt reports whether the person authenticated at the IdP within
// maxAge of now.
func (s *Session) FreshAt(now time.Time, maxAge time.Duration) bool {
	return !s.AuthTime.IsZero() && now.Sub(s.AuthTime) <= maxAge && !s.AuthTime.After(now.Add(clockSkew))
}

func (s *Service) csrfToken(sess *Session) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("alpd/signin/csrf/v1\x00" + sess.Tenant + "\x00" + sess.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (s *Service) setSession(w http.ResponseWriter, sess *Session) error {
	enc, err := s.sessionCodec.Encode(SessionCookie, sess)
	if err != nil {
		return &wrappedError{e: newError(http.StatusInternalServerError, CodeInternal, "could not create the session"), cause: err}
	}
	if len(SessionCookie)+1+len(enc) > maxCookieBytes {
		return newError(http.StatusInternalServerError, CodeSessionTooLarge, "the session does not fit in a cookie (too many roles?)")
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    enc,
		Path:     "/",
		MaxAge:   int(s.cfg.SessionTTL / time.Second),
		Secure:   s.secure,
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	})
	return nil
}

func (s *Service) clearSession(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		Secure: s.secure, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
}

// Session returns the request's valid session: ErrNoSession without a
// cookie, an *httpjson.Error with code session_invalid for a tampered, foreign or
// undecodable cookie, session_expired after its expiry, session_revoked
// after sign-out or revocation (no server-side record), and
// sessions_unavailable (503) when the record cannot be read.
func (s *Service) Session(r *http.Request) (*Session, error) {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return nil, ErrNoSession
	}
	invalid := newError(http.StatusUnauthorized, CodeSessionInvalid, "the session cookie is not valid; sign in again")
	var sess Session
	if err := s.sessionCodec.Decode(SessionCookie, c.Value, &sess); err != nil {
		return nil, invalid
	}
	if sess.ID == "" || sess.PersonID == "" || sess.Address == "" || s.tenants[sess.Tenant] == nil {
		return nil, invalid
	}
	now := s.now()
	if !now.Before(sess.Expires) {
		return nil, newError(http.StatusUnauthorized, CodeSessionExpired, "the session has expired; sign in again")
	}
	if sess.Issued.After(now.Add(clockSkew)) || sess.Expires.Sub(sess.Issued) > s.cfg.SessionTTL {
		return nil, invalid
	}
	if err := s.cfg.Sessions.CheckSession(r.Context(), &sess); errors.Is(err, ErrSessionRevoked) {
		return nil, newError(http.StatusUnauthorized, CodeSessionRevoked, "this session was signed out or revoked; sign in again")
	} else if err != nil {
		s.log.Error("signin: cannot check a session", "tenant", sess.Tenant, "person_id", sess.PersonID, "err", err)
		return nil, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeSessionsUnavailable,
			Message: "sessions cannot be checked right now; try again shortly", RetryAfter: 5}
	}
	sess.csrf = s.csrfToken(&sess)
	return &sess, nil
}

type sessionKey struct{}

// SessionFromContext returns the session RequireSession or RequireFresh
// put into the request context, or nil.
func SessionFromContext(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

// RequireSession passes requests with a valid session to next (the session
// is in the context, see SessionFromContext). Without one, a GET or HEAD is
// redirected to sign in and come back; other methods get 401.
func (s *Service) RequireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.Session(r)
		if err != nil {
			s.refuseNoSession(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
	})
}

// RequireFresh is RequireSession plus freshness: when the person's last
// authentication at the IdP (auth_time) is older than Config.FreshMaxAge, a
// GET or HEAD is redirected to a fresh sign-in
// (/signin?tenant=…&fresh=1&return=<this path>); other methods get 401
// fresh_signin_required.
func (s *Service) RequireFresh(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.Session(r)
		if err != nil {
			s.refuseNoSession(w, r, err)
			return
		}
		if !sess.FreshAt(s.now(), s.cfg.FreshMaxAge) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				q := url.Values{"tenant": {sess.Tenant}, "fresh": {"1"}, "return": {returnHere(r)}, "login_hint": {sess.Address}}
				setNoStore(w)
				http.Redirect(w, r, PathSignIn+"?"+q.Encode(), http.StatusFound)
				return
			}
			httpjson.WriteError(w, newError(http.StatusUnauthorized, CodeFreshSigninRequired, "this action needs a fresh sign-in; reload the page"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
	})
}

func (s *Service) refuseNoSession(w http.ResponseWriter, r *http.Request, err error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		setNoStore(w)
		http.Redirect(w, r, s.SignInURL(s.singleTenant(), returnHere(r), false), http.StatusFound)
		return
	}
	httpjson.WriteError(w, err)
}

// returnHere is the request's own path and query if it is a safe return
// target, else "/".
func returnHere(r *http.Request) string {
	p, err := SafeReturnPath(r.URL.RequestURI())
	if err != nil {
		return "/"
	}
	return p
}

const (
	maxFormBytes = 1 << 20
	// maxCookieBytes is what every browser stores for name=value.
	maxCookieBytes = 4000
)

// CheckCSRF checks a state-changing request: it must come from this site
// (Sec-Fetch-Site, if sent, is same-origin; Origin, or else Referer, must
// be PublicURL's origin; a request with neither is refused) and carry the
// session's CSRF token in the form field "csrf" (urlencoded or multipart
// body, never the query) or the X-CSRF-Token header. It needs a valid
// session. It answers an *httpjson.Error with status 403 (or the session's 401).
func (s *Service) CheckCSRF(r *http.Request) error {
	_, err := s.checkCSRF(r)
	return err
}

func (s *Service) checkCSRF(r *http.Request) (*Session, error) {
	if err := s.checkOrigin(r); err != nil {
		return nil, err
	}
	sess, err := s.Session(r)
	if err != nil {
		return nil, err
	}
	token := r.Header.Get("X-CSRF-Token")
	if token == "" {
		if r.PostForm == nil && r.Body != nil {
			r.Body = http.MaxBytesReader(nil, r.Body, maxFormBytes)
		}
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if ct == "multipart/form-data" {
			_ = r.ParseMultipartForm(maxFormBytes)
		} else {
			_ = r.ParseForm()
		}
		token = r.PostForm.Get("csrf")
	}
	want := sess.CSRFToken()
	if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(want)) != 1 {
		return nil, newError(http.StatusForbidden, CodeCSRFToken, "missing or wrong CSRF token; reload the page and try again")
	}
	return sess, nil
}

func (s *Service) checkOrigin(r *http.Request) error {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return newError(http.StatusForbidden, CodeCSRFOrigin, "cross-site request refused")
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o != s.origin {
			return newError(http.StatusForbidden, CodeCSRFOrigin, "cross-origin request refused")
		}
		return nil
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		u, err := url.Parse(ref)
		if err != nil || u.Scheme+"://"+u.Host != s.origin {
			return newError(http.StatusForbidden, CodeCSRFOrigin, "cross-origin request refused")
		}
		return nil
	}
	return newError(http.StatusForbidden, CodeCSRFOriginMissing, "request without Origin or Referer refused")
}

// RequireCSRF passes only requests for which CheckCSRF succeeds; the
// session is in the context.
func (s *Service) RequireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, err := s.checkCSRF(r)
		if err != nil {
			httpjson.WriteError(w, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, sess)))
	})
}

// serveSignOut: POST /signout (CSRF-protected) ends the session (its
// server-side record is deleted, so every copy of the cookie stops
// working), clears the cookie and redirects (303) to the form's "return"
// path, default "/". Without a valid session there is nothing to protect:
// the cookie is cleared anyway. When the record cannot be deleted the
// answer is 503 and the session stays signed in: a sign-out that only
// cleared this browser's cookie would be a false promise.
func (s *Service) serveSignOut(w http.ResponseWriter, r *http.Request) {
	setNoStore(w)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpjson.WriteError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "use POST"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if _, err := s.Session(r); err == nil {
		sess, err := s.checkCSRF(r)
		if err != nil {
			httpjson.WriteError(w, err)
			return
		}
		if err := s.cfg.Sessions.DeleteSession(r.Context(), sess); err != nil {
			s.log.Error("signin: sign-out failed", "tenant", sess.Tenant, "person_id", sess.PersonID, "err", err)
			httpjson.WriteError(w, &httpjson.Error{Status: http.StatusServiceUnavailable, Code: CodeSessionsUnavailable,
				Message: "the session could not be ended right now; try again shortly", RetryAfter: 5})
			return
		}
		s.log.Info("signin: signed out", "tenant", sess.Tenant, "person_id", sess.PersonID)
	}
	s.clearSession(w)
	ret, err := SafeReturnPath(r.PostFormValue("return"))
	if err != nil {
		ret = "/"
	}
	http.Redirect(w, r, ret, http.StatusSeeOther)
}
