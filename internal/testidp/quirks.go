package testidp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// SetRefreshedIDTokenNonce makes ID tokens issued on the refresh grant carry
// nonce instead of the sign-in's (or none): an IdP that breaks OIDC Core
// §12.2, for tests of the relying party's check. The refresh token is still
// rotated. "" restores the configured behaviour.
func (idp *IdP) SetRefreshedIDTokenNonce(nonce string) {
	idp.store.mu.Lock()
	idp.store.refreshNonce = nonce
	idp.store.mu.Unlock()
}

// serveDeadRefreshTokenError serves a token request through next and, for
// the refresh grant, rewrites an invalid_grant answer into
// Config.DeadRefreshTokenError. op answers every dead refresh token with
// invalid_grant and offers no hook to change that.
func (idp *IdP) serveDeadRefreshTokenError(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// op parses the form again; ParseForm keeps what it read.
	if r.Method != http.MethodPost || r.ParseForm() != nil || r.PostForm.Get("grant_type") != string(oidc.GrantTypeRefreshToken) {
		next.ServeHTTP(w, r)
		return
	}
	rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
	next.ServeHTTP(rec, r)
	body := rec.body.Bytes()
	var e map[string]any
	if rec.status == http.StatusBadRequest && json.Unmarshal(body, &e) == nil && e["error"] == string(oidc.InvalidGrant) {
		e["error"] = idp.cfg.DeadRefreshTokenError
		if b, err := json.Marshal(e); err == nil {
			body = b
			rec.header.Set("Content-Length", strconv.Itoa(len(body)))
		}
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(body)
}

// bufferedResponse holds a response (a token endpoint's: small) until it
// is rewritten.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if !b.wrote {
		b.status, b.wrote = status, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}
