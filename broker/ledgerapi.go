package broker

import (
	"context"
	"net/http"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ledger"
)

// ledgerAPIOptions configure the ledger's person-facing read API with the
// same token checks as ingress (ingress's own when it runs here too), and
// with identity's web sessions when identity runs in this process. In split
// mode the ledger's processes follow identity themselves and accept bearer
// tokens only.
func (b *Broker) ledgerAPIOptions() *ledger.APIOptions {
	o := &ledger.APIOptions{Issuers: b.issuers(), Resource: b.publicURL(),
		ResourceMetadataURL: b.publicURL() + identity.ResourceMetadataPath, Limits: b.cfg.LedgerAPI}
	if b.Runs("identity") {
		o.Sessions = identitySessions{b}
	}
	if b.ingress != nil {
		o.Auth = ingressAuth{b.ingress}
	}
	o.UI = b.ui()
	return o
}

// ingressAuth checks tokens with ingress's authenticator, which changes
// once ingress's identity projection is open.
type ingressAuth struct{ in *ingress.Service }

func (a ingressAuth) Authenticate(ctx context.Context, authorization string, scopes ...string) (agentauth.Principal, error) {
	return a.in.Authenticator().Authenticate(ctx, authorization, scopes...)
}

// identitySessions reads people's web sessions, and checks their writes'
// CSRF tokens, through the local identity service's sign-in (none without
// IdPs: no session then). The ledger reads only; policy's person and admin
// routes write.
type identitySessions struct{ b *Broker }

func (s identitySessions) Session(r *http.Request) (*signin.Session, error) {
	id := s.b.Identity()
	if id == nil || id.SignIn() == nil {
		return nil, signin.ErrNoSession
	}
	return id.SignIn().Session(r)
}

// CheckCSRF checks a person's state-changing request with the local
// identity service's sign-in (refused as without a session when there is
// none).
func (s identitySessions) CheckCSRF(r *http.Request) error {
	id := s.b.Identity()
	if id == nil || id.SignIn() == nil {
		return signin.ErrNoSession
	}
	return id.SignIn().CheckCSRF(r)
}
