package approvals

import (
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
)

// URLSpace is approvals' part of the public URL space
// (docs/architecture.md): the person's pages and their JSON API. Holding
// it, served or not, keeps every other service out of it.
func URLSpace() httproute.Space {
	return httproute.Space{Owner: envelope.ServiceName(alpv1.Role_ROLE_APPROVALS), Paths: []string{
		"/approvals", "/approvals/",
		"/v1/approvals", "/v1/approvals/",
	}}
}
