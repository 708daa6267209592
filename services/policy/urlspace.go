package policy

import (
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/policy/pages"
)

// URLSpace is policy's part of the public URL space (docs/architecture.md):
// a person's rules, connections and blocks, and the organizations' policy
// sets, message types and pre-approved relationships (services/policy/api).
// Holding it, served or not, keeps every other service out of it.
func URLSpace() httproute.Space {
	return httproute.Space{Owner: envelope.ServiceName(alpv1.Role_ROLE_POLICY), Paths: []string{
		"/v1/rules", "/v1/rules/",
		"/v1/connections", "/v1/connections/",
		"/v1/blocks", "/v1/blocks/",
		"/v1/admin/policies/",
		"/v1/admin/types", "/v1/admin/types/",
		"/v1/admin/relationships",
		// The pages (services/policy/pages).
		pages.PathConnections, pages.PathConnections + "/",
		pages.PathRules,
		pages.PathAdminRels, pages.PathAdminRels + "/",
	}}
}
