// Package rulestore keeps every party's Cedar rule set (services/policy/rules)
// event-sourced on the policy stream, one subject per set:
// alp.policy.<tenant>.rules.<party>.<owner>, the owner being the tenant for
// the organization parties (sender_org, recipient_org) and the person for
// the person parties (sender, recipient).
//
// Why event-sourced: a rule set decides what may leave and reach people, so
// every version is kept (who wrote what, when) and every policy replica
// builds the same view by following the stream (internal/projection). A
// replica is not ready while its view is stale (Fresh).
//
// Writes (Put) are validated before anything is stored: the engine parses
// the text, checks it against the entity model, the annotations and the
// size limits, and a refusal is a *rules.ValidationError listing every
// problem with its line:column. An agent may only tighten its person's set
// (rules.IsTightening: add forbids, change nothing else); a loosening is
// refused with code loosening_refused. Versions are 1, 2, 3… per set; a
// writer names the version it read (0 before the first) and a stale one is
// refused with a *ConflictError (code version_conflict), decided by the
// stream itself: the append carries the subject's last sequence as its
// expectation, so of two replicas writing the same version at once exactly
// one succeeds.
//
// Reads (Current) answer the compiled set and its version; a set never
// written answers the party's shipped template as version 0. Compiled sets
// come from a rules.Cache keyed by content, so each version is compiled
// once per replica and the many people still on the template share one.
//
// Privacy: a person's set is personal data (it names whom they deal with
// and how). It stands in clear on the policy stream, which is kept forever;
// sealing it with the person's data key (internal/seal) so erasure shreds
// it is not done here.
package rulestore
