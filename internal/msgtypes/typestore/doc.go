// Package typestore keeps the organizations' message types of some tenants
// (internal/msgtypes) as events on the policy stream, and projects them
// into a msgtypes.Registry on every replica that follows it. Policy writes
// the registrations an org admin makes; ingress, the REST and MCP
// surfaces and federation validate bodies against the same types, so the
// store lives in internal/ and every one of them can open it.
//
// # Events
//
// One MessageTypeRegistered per type name, ever, on the name's own subject
// alp.policy.<tenant>.type.<streams.PolicyTypeID(name)> (a type version is
// immutable: a change is the next version, under another name). The event
// holds the schema in canonical form and its digest.
//
// [Store.Register] checks the schema against the replica's registry first
// (msgtypes.Registry.Check): a refusal is the registry's
// *msgtypes.RegistrationError and nothing is appended. The identical
// schema again answers the registered type without a second event; a
// different one is refused with msgtypes.CodeTypeExists. Otherwise it
// appends expecting the subject's version (0, unless a refused event
// stands there), so of two replicas registering one name at once exactly
// one appends; the other reloads and answers as for a second
// registration.
//
// # Projection
//
// Each event is applied by registering its schema, which depends on
// nothing but the events before it (the registry reads no clock), so every
// replica ends with the same registry. An event that does not register (a
// foreign writer's, or a schema a later version of the rules refuses) is
// logged with its code and skipped; it never stops the projection.
package typestore
