package clientreg

import (
	"fmt"
	"net/http"

	"github.com/alpd-project/alpd/internal/httproute"
)

// DCRRoute is POST /oauth/<tenant>/register (DCRHandler), which takes a
// JSON body of at most Config.MaxBodyBytes; an announced larger one is
// refused with the RFC 7591 error before it is read.
func (reg *Registrar) DCRRoute(tenant string) httproute.Route {
	return httproute.Route{Pattern: "/oauth/" + tenant + "/register", Handler: reg.DCRHandler(tenant),
		Caller: httproute.Public, BodyLimit: reg.cfg.MaxBodyBytes,
		TooLarge: func(w http.ResponseWriter, _ *http.Request, limit int64) {
			writeOAuthError(w, http.StatusRequestEntityTooLarge, CodeInvalidRequest, fmt.Sprintf("the body exceeds %d bytes", limit))
		}}
}

// AdminRoutes are the admin endpoints (AdminHandler), JSON bodies of at most
// Config.MaxBodyBytes.
func (reg *Registrar) AdminRoutes() []httproute.Route {
	return []httproute.Route{
		{Pattern: PathAdminClients, Handler: http.HandlerFunc(reg.serveRegisterClient), Caller: httproute.Person, BodyLimit: reg.cfg.MaxBodyBytes},
		{Pattern: PathAdminAttestation, Handler: http.HandlerFunc(reg.serveAttestation), Caller: httproute.Person, BodyLimit: reg.cfg.MaxBodyBytes},
	}
}

// PATRoutes are the personal access token endpoints (PATHandler): issuing
// takes a JSON body of at most Config.MaxBodyBytes, revoking none.
func (reg *Registrar) PATRoutes() []httproute.Route {
	return []httproute.Route{
		{Pattern: PathPATs, Caller: httproute.Person, BodyLimit: reg.cfg.MaxBodyBytes,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.Method {
				case http.MethodPost:
					reg.serveIssuePAT(w, r)
				case http.MethodGet, http.MethodHead:
					reg.serveListPATs(w, r)
				default:
					methodNotAllowed(w, http.MethodGet, http.MethodPost)
				}
			})},
		{Pattern: PathPAT, Caller: httproute.Person, BodyLimit: httproute.NoBody,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodDelete {
					methodNotAllowed(w, http.MethodDelete)
					return
				}
				reg.serveRevokePAT(w, r)
			})},
	}
}
