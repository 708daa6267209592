package broker

import (
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/internal/webui"
)

// codeWebSessionsUnavailable: the page's process has no sign-in (identity
// runs elsewhere).
const codeWebSessionsUnavailable = "web_sessions_unavailable"

// ui is the shared part of the people's pages (internal/webui), when
// identity runs in this process: the pages need its sign-in. In split mode
// the pages are served where identity runs alongside them.
func (b *Broker) ui() *webui.UI {
	if !b.Runs("identity") {
		return nil
	}
	b.uiOnce.Do(func() { b.webUI = webui.New(webui.Options{Sessions: identitySessions{b}}) })
	return b.webUI
}

// The page guards go through the local identity service's sign-in, looked
// up on each request (identity starts before the pages are served).
func (s identitySessions) guard(w http.ResponseWriter, use func(*signin.Service)) {
	id := s.b.Identity()
	if id == nil || id.SignIn() == nil {
		httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, codeWebSessionsUnavailable,
			"people sign in only where identity runs with an IdP configured"))
		return
	}
	use(id.SignIn())
}

// RequireSession implements webui.Sessions.
func (s identitySessions) RequireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.guard(w, func(in *signin.Service) { in.RequireSession(next).ServeHTTP(w, r) })
	})
}

// RequireFresh implements webui.Sessions.
func (s identitySessions) RequireFresh(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.guard(w, func(in *signin.Service) { in.RequireFresh(next).ServeHTTP(w, r) })
	})
}

// RequireCSRF implements webui.Sessions.
func (s identitySessions) RequireCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.guard(w, func(in *signin.Service) { in.RequireCSRF(next).ServeHTTP(w, r) })
	})
}
