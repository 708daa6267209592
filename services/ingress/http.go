package ingress

import (
	"slices"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
)

// URLSpace is ingress's part of the public URL space (docs/architecture.md):
// the agents' doors, one per binding: NLIP's /nlip, MCP's /mcp and REST's
// /v1/agent/, held whether or not a binding serves them, so that no other
// service takes them.
func URLSpace() httproute.Space {
	return httproute.Space{Owner: envelope.ServiceName(alpv1.Role_ROLE_INGRESS), Paths: []string{
		"/nlip", "/nlip/",
		"/mcp", "/mcp/",
		"/v1/agent/",
	}}
}

// A Binding puts the send path on HTTP in one protocol (NLIP): given the
// service, the routes that serve it. Bindings import ingress, not the other
// way round, so the broker hands them in (Options.Bindings).
type Binding func(*Service) []httproute.Route

// HTTPRoutes are the routes of every binding, each within URLSpace.
func (s *Service) HTTPRoutes() []httproute.Route { return slices.Clone(s.routes) }
