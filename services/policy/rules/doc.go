// Package rules holds every party's rules as Cedar policy sets and decides,
// field by field, whether a field may cross: the sender's permissions, the
// sender organisation's egress policy, the recipient organisation's
// ingress policy and the recipient's rules (issue 12, item 4). A field
// crosses only if every evaluated party's set permits it and none forbids
// it; each denial names the party, the policy's @id and its public @reason
// code.
//
// # Entity model
//
// schema.cedarschema (embedded; Schema returns it) is what every set is
// validated against, in strict mode:
//
//   - principal: Alp::Agent, the sending agent, id = agent id, with
//     person, trust_class ("consumer" | "company") and tenant.
//   - action: Alp::Action::"share_field" (may this field cross?) asked of
//     every party; Alp::Action::"commit" (may it commit the recipient
//     without asking?) asked of the recipient's set only, by DecideCommit.
//   - resource: Alp::Field, id = JSON pointer, with type (message type),
//     pointer, class ("public" | "internal" | "confidential"), freetext and
//     commits ("" or what the type commits).
//   - context: sender and recipient {address, tenant, org, roles} and
//     relationship ("connected" | "stranger" | "blocked" |
//     "org_preapproved").
//
// # Writes
//
// Engine.Validate refuses, with every problem at once (*ValidationError,
// codes in errors.go, line:column): Cedar syntax, a policy without @id or
// @reason, a duplicate @id, an @reason that is not a code (it is shown to
// other parties), unknown entity types, actions or attributes and type
// errors (cedar-go's experimental x/exp/schema/validate), and sets over
// the byte or policy limits. IsTightening is the extra check for an agent
// token, which may only add forbids.
//
// # Evaluation
//
// Compile turns a Set into a Compiled evaluator; Cache keys compiled sets
// by party and content hash so each version compiles once and people on
// the default template share one. DecideMessage evaluates the sets a stage
// holds (Parties) for all fields of a message. Deny wins; a party with no
// matching permit denies with DefaultDenyID; a forbid whose evaluation
// errors denies (Cedar would skip it, which fails open). Verdict.PublicView
// hides other parties' policy ids: another party only ever sees the party
// and the reason code, never rule text.
//
// Templates (templates/*.cedar, Template) are the shipped, editable
// default sets of each party.
package rules
