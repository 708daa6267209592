package ledger

import (
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/envelope"
	"github.com/alpd-project/alpd/internal/httproute"
	"github.com/alpd-project/alpd/services/ledger/api"
	"github.com/alpd-project/alpd/services/ledger/pages"
)

// URLSpace is the ledger's part of the public URL space
// (docs/architecture.md): a person's read-and-prove API.
func URLSpace() httproute.Space {
	return httproute.Space{Owner: envelope.ServiceName(alpv1.Role_ROLE_LEDGER), Paths: []string{
		api.PathHead, api.PathHead + "/",
		pages.PathLedger,
	}}
}
