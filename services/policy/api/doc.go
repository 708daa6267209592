// Package api is policy's REST surface: what people, their agents and
// organizations' admins write into policy's state (services/policy/...
// relationships, rulestore, and internal/msgtypes/typestore), and read back.
//
//	person (web session; CSRF on writes)
//	  GET    /v1/connections                    pending requests and every connection of the person
//	  POST   /v1/connections/{id}/accept        accept a request (also decline, block)
//	  GET    /v1/blocks                         the person's block list
//	  POST   /v1/blocks                         block {"kind": person|address|domain, "value": …}
//	  DELETE /v1/blocks/{kind}/{value}          lift a block
//	agent (bearer, alp.read to read, alp.send to write) or person
//	  GET    /v1/rules                          the person's sender and recipient sets
//	  GET    /v1/rules/{party}                  one of them (ETag: its version)
//	  PUT    /v1/rules/{party}                  store a new version (body: Cedar; If-Match: the version edited)
//	organization admin (web session with the admin role; CSRF on writes)
//	  GET|PUT /v1/admin/policies/{set}          sender_org or recipient_org
//	  GET     /v1/admin/types                   the organization's registered message types
//	  GET|PUT /v1/admin/types/{name...}         one type's schema; register one
//	  GET|PUT /v1/admin/relationships           the organization's pre-approved relationships
//
// Who a request speaks for always comes from its credential (the session's
// or the token's person and tenant), never from the request. An agent
// writes its person's sets as rulestore.ByAgent, so the store refuses
// anything but a tightening (loosening_refused).
//
// Every write is validated before anything is stored and a refusal stores
// nothing: rule text by the rules engine (every problem at once in the
// problem's "problems" member, with line and column), schemas by the
// message-type registry (its code and the JSON pointer into the schema),
// relationships' arguments by their store. Sizes are the routes' body
// limits (413 body_too_large before anything is read). Errors are RFC
// 9457 problems (internal/httpjson) carrying the underlying code.
//
// Web sessions are identity's (internal/signin). Only a process that runs
// identity too can check them: elsewhere (split mode) the person and
// admin routes answer 503 web_sessions_unavailable, and /v1/rules takes
// bearer tokens only.
package api
