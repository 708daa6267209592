// Package decision runs one message through policy's two stages and says,
// field by field, what crosses: the sender side (the sender's permissions,
// the sender organization's egress policy, and the hard rules the sender's
// broker can check) and the recipient side (the recipient organization's
// ingress policy, the recipient's rules and the remaining hard rules).
//
// It is pure: the caller (the policy worker, alpctl policy check through
// DryRun, the conformance vectors of spec/vectors/policy) gathers the
// inputs — the message type, the opened body, the compiled rule sets, the
// relationship as policy's projection answers it, the trust classes of the
// recipient's agents — and gets back a Result. Nothing here reads a clock,
// a stream or a key, so every replica decides alike and a vector file is a
// complete description of a case.
//
// # Hard rules
//
// These are Go, not Cedar, and no party's rules can change them:
//
//   - A body that fails its schema is refused (invalid_body).
//   - Blocked: nothing from someone the recipient (or, on the sender side,
//     the sender) blocked crosses (blocked).
//   - Strangers: a stranger may only send connection.request/v1; anything
//     else is refused (stranger). A connection request is held for the
//     person (HeldConnectionRequest) and never given to an agent.
//   - Free text crosses only if the recipient's own set allows it (the
//     recipient opted in; their default template forbids it), at most 280
//     code points after normalization (freetext), and with no blocking DLP
//     finding (dlp_<detector>); flagged detectors are reported, never the
//     text. A view or held item with free text is labelled untrusted.
//   - Confidential fields go only to the recipient's company-class agents:
//     a consumer-class agent's view leaves them out, and they are held for
//     the person (HeldConfidentialFields).
//   - A type that commits the recipient (x-alp-commits) is held for the
//     person (HeldCommitment) unless the recipient's set permits the commit
//     action for it (a standing approval).
//
// # Outcome
//
// Refuse when a hard rule refuses the message or no field crosses; hold
// when the whole message waits for the person (a connection request, a
// commitment); deliver partial when some field was denied; deliver
// otherwise. Held confidential fields do not change the outcome: the
// message is delivered, those fields wait.
package decision
