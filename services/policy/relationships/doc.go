// Package relationships is policy's event-sourced state of who may reach
// whom: connections between a person of a tenant and someone else (another
// person of the tenant, or a remote address), the blocks each person keeps,
// and the organization's pre-approved relationships. Policy asks it one
// question per message ([Store.Relationship]); a stranger may only ask to
// connect, and that request is held for the person, who accepts, declines
// or blocks it through their web session.
//
// # Events and subjects
//
// Every change is an event (alp/v1/policy.proto) on policy's own stream
// <NS>_POLICY, one aggregate per subject, appended with bus.Append and the
// subject's last sequence as expectation, so two replicas can never fork
// an aggregate: the loser of a race waits until its projection has the
// winner's event, decides again (usually finding the work done or refused),
// and gives up after a few rounds.
//
//	alp.policy.<tenant token>.conn.<connection id>  ConnectionRequested, ConnectionAccepted, ConnectionDeclined
//	alp.policy.<tenant token>.block.<person id>     PersonBlocked, PersonUnblocked (the person's block list)
//	alp.policy.<tenant token>.org.<rule id>         OrgRelationshipSet
//
// Connection ids derive from the pair of parties ([ConnectionID]), so every
// request between the same two parties meets on one subject, and a person's
// two people-of-the-tenant connections are one whichever side asked.
//
// # The state machine of a connection
//
//	(none)    --Request-->  requested
//	requested --Accept-->   accepted     (only by the person asked)
//	requested --Decline-->  declined     (only by the person asked)
//	requested --Request by the person asked (two people of the tenant)--> accepted
//	declined  --Request-->  refused, ErrDeclined
//	(none)    --AcceptedByRemote-->  requested, then accepted
//	requested --AcceptedByRemote-->  accepted
//
// AcceptedByRemote is a remote address's connection.accept/v1 answering
// the person's own request (which was decided at the remote broker, so
// nothing of it is here): the answer counts as the remote party asking,
// the person's earlier request as their yes, as when two people of the
// tenant ask each other.
//
// A repeated request, accept or decline of the same state is answered with
// the connection and no new event (a double click or a retried command
// changes nothing). A declined connection cannot be re-requested: a
// decline is the person's answer, and letting the asker try again would
// let a stranger put a new item before the person as often as they like.
// The person can still reach the asker themselves (a person's own request
// is a new message the other side decides on). Blocking works from any
// state and is kept apart from connections, on the person's block list: a
// block beats everything, and lifting it (Unblock) brings back whatever the
// connection was.
//
// # The answer
//
// [Store.Relationship] answers, in this order: blocked (the recipient
// blocked the sender's person, address or domain), connected (an accepted
// connection), org_preapproved (an active organization rule covers the
// pair), requested, declined, stranger. Organization rules: same_org
// connects every two people of the tenant; role_may_receive_from lets the
// tenant's people with a role receive from any address at a domain (that
// exact domain; a person of the tenant counts as being at the tenant's
// domain).
//
// An organization rule may also list commit actions (OrgRule.Commits,
// x-alp-commits words): [Store.OrgCommits] answers the rules covering a
// pair that do, and a commitment of one of them between the two is
// delivered without asking (services/policy/decision).
//
// # Personal data and erasure
//
// Events name the tenant's people by person id only and never carry a
// message body (a request names its envelope). A remote counterparty has
// no person id, so a request from them, and a block of them, carries their
// address in clear on a stream kept forever. That is personal data of
// someone who is not a user of this broker: the stream, like identity's,
// is never rewritten, so the address stays until the stream is. Erasing a
// person of the tenant (identity's DataKeyDestroyed) does not yet drop their
// relationships from this projection; the integration should follow the
// erasure tombstones and forget the person's connections and blocks, and
// the addresses should move under the person's data key (sealed, so that
// erasure shreds them) before the stream holds real traffic.
//
// # Projection and freshness
//
// Every policy replica opens a store and follows the stream
// (internal/projection); a command returns once its event is stored and
// applied here (read-your-writes), other replicas see it as soon as their
// reader delivers it. [Store.Fresh] fails while the projection may be
// missing events; a replica must not decide (is not ready) while it does.
package relationships
