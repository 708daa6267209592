package identity

import (
	"github.com/zitadel/oidc/v3/pkg/oidc"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/internal/signin"
	"github.com/alpd-project/alpd/services/identity/clientreg"
	"github.com/alpd-project/alpd/services/identity/oauthas"
)

// URLSpace is identity's part of the public URL space
// (docs/architecture.md): people's sign-in, the agents' authorization
// servers (one per tenant under /oauth/<tenant>) with their discovery
// documents, company clients and personal access tokens. Of /.well-known/
// it holds only the OAuth and OpenID documents: the rest is shared
// (federation's /.well-known/alp).
func URLSpace() httproute.Space {
	return httproute.Space{Owner: envelope.ServiceName(alpv1.Role_ROLE_IDENTITY), Paths: []string{
		signin.PathSignIn, signin.PathSignIn + "/", signin.PathSignOut,
		oauthas.PathPrefix,
		oauthas.WellKnownAS, oauthas.WellKnownAS + "/",
		oauthas.WellKnownResource, oauthas.WellKnownResource + "/",
		oidc.DiscoveryEndpoint, oidc.DiscoveryEndpoint + "/",
		clientreg.PathAdminClients, clientreg.PathAdminClients + "/",
		clientreg.PathPATs, clientreg.PathPATs + "/",
	}}
}
