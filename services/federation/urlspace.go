package federation

import (
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
)

// URLSpace is federation's part of the public URL space
// (docs/architecture.md): discovery (/.well-known/alp, and the broker's
// keys below it) and the broker-to-broker API. Holding it, served or not,
// keeps every other service out of it.
func URLSpace() httproute.Space {
	return httproute.Space{Owner: envelope.ServiceName(alpv1.Role_ROLE_FEDERATION), Paths: []string{
		"/.well-known/alp", "/.well-known/alp/",
		"/federation/",
	}}
}
