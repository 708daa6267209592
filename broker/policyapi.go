package broker

import (
	"net/http"

	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/identity"
	"github.com/alpd-project/alpd/services/policy"
)

// policyOptions configure the policy service: its workers, and its REST
// endpoints with the same token checks as ingress (ingress's own when it
// runs here too) and identity's web sessions when identity runs in this
// process. In split mode policy's processes follow identity themselves and
// take agents' bearer tokens only (docs/policy.md).
func (b *Broker) policyOptions() policy.Options {
	o := policy.Options{Workers: b.cfg.PolicyWorkers, API: policy.APIOptions{Issuers: b.issuers(), Resource: b.publicURL(),
		ResourceMetadataURL: b.publicURL() + identity.ResourceMetadataPath}}
	if b.Runs("identity") {
		o.API.Sessions = identitySessions{b}
	}
	if b.ingress != nil {
		o.API.Auth = ingressAuth{b.ingress}
	}
	return o
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
