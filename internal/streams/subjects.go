package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/alpd-project/alpd/internal/bus"
)

// pattern is a subject pattern alp.<kind>.<tokens…> (tokens may be
// wildcards).
func pattern(kind string, tokens ...string) string {
	return strings.Join(append([]string{bus.SubjectPrefix, kind}, tokens...), ".")
}

// TenantFilter is every subject of kind for one tenant:
// alp.<kind>.<tenant token>.>. A stream holds these for its tenants, its
// owner may publish on them, and readers filter on them.
func TenantFilter(kind, tenant string) string {
	return pattern(kind, bus.TenantToken(tenant), ">")
}

// SendSubject is the subject of one envelope's SendRequested:
// alp.send.<tenant>.<person>.<envelope>. One subject per envelope lets
// ingress append it with "no message on this subject yet" as expectation,
// so an agent's retry with the same idempotency key never makes a second
// event, however late it comes (JetStream's dedupe window is minutes).
func SendSubject(tenant, personID, envelopeID string) (string, error) {
	return bus.Subject(Send, tenant, personID, envelopeID)
}

// DecidedSubject is the subject of policy's decision on one envelope:
// alp.decided.<tenant>.<sender person>.<envelope>, so the decision is one
// direct get away for whoever knows the envelope.
func DecidedSubject(tenant, senderPersonID, envelopeID string) (string, error) {
	return bus.Subject(Decided, tenant, senderPersonID, envelopeID)
}

// DeliverSubject is the subject of policy's recipient-side decision on one
// envelope for one recipient hosted here: alp.deliver.<tenant>.<person>.<envelope>.
func DeliverSubject(tenant, recipientPersonID, envelopeID string) (string, error) {
	return bus.Subject(Deliver, tenant, recipientPersonID, envelopeID)
}

// The fifth token of an inbox subject alp.inbox.<tenant>.<person>.<what>.…
const (
	// InboxItem: an item of the person's inbox (alp.inbox.<tenant>.<person>.item.<envelope>).
	InboxItem = "item"
	// InboxAck: an agent's acknowledgement of an item
	// (alp.inbox.<tenant>.<person>.ack.<agent token>.<envelope>).
	InboxAck = "ack"
	// InboxDecision: the person's decision on one held item of an item, as
	// ingress carries it out (alp.inbox.<tenant>.<person>.decision.<envelope>.<held id>).
	InboxDecision = "decision"
)

// InboxItemSubject is the subject of one item of a person's inbox, written
// once (an expected-sequence append), so a Deliverable filed twice makes one
// item.
func InboxItemSubject(tenant, personID, envelopeID string) (string, error) {
	return bus.Subject(Inbox, tenant, personID, InboxItem, envelopeID)
}

// InboxAckSubject is the subject of one agent's acknowledgement of one
// item; agentToken is AgentToken of the agent's id.
func InboxAckSubject(tenant, personID, agentToken, envelopeID string) (string, error) {
	return bus.Subject(Inbox, tenant, personID, InboxAck, agentToken, envelopeID)
}

// InboxReleaseAckSubject is the subject of one agent's acknowledgement of
// an item again after the person released held fields of it (heldID):
// alp.inbox.<tenant>.<person>.ack.<agent token>.<envelope>.<held id>,
// written once per release like the first acknowledgement.
func InboxReleaseAckSubject(tenant, personID, agentToken, envelopeID, heldID string) (string, error) {
	return bus.Subject(Inbox, tenant, personID, InboxAck, agentToken, envelopeID, heldID)
}

// InboxDecisionSubject is the subject of the person's decision on one held
// item of an inbox item (ApprovalDecided, copied from the approvals stream
// by ingress), written once, so a redelivered decision releases once.
func InboxDecisionSubject(tenant, personID, envelopeID, heldID string) (string, error) {
	return bus.Subject(Inbox, tenant, personID, InboxDecision, envelopeID, heldID)
}

// InboxPersonFilter is every subject of one person's inbox.
func InboxPersonFilter(tenant, personID string) (string, error) {
	s, err := bus.Subject(Inbox, tenant, personID)
	if err != nil {
		return "", err
	}
	return s + ".>", nil
}

// AgentToken is the subject token of an agent: a hash of its id, because
// agent ids (client ids may be URLs) are not subject tokens.
func AgentToken(agentID string) string {
	sum := sha256.Sum256([]byte(agentID))
	return hex.EncodeToString(sum[:16])
}

// The tokens that say what a subject of federation's log (INBOUND) holds:
// alp.inbound.<tenant>.<person>.verified.<envelope>,
// alp.inbound.<tenant>.<person>.status.<envelope> and
// alp.inbound.<tenant>.refused.<digest>.
const (
	InboundVerified = "verified"
	InboundStatus   = "status"
	InboundRefused  = "refused"
)

// InboundVerifiedSubject is the subject of an envelope from another broker
// that passed the receiver's checks, for one recipient hosted here. It is
// written once (an expected-empty append): a second copy of the envelope,
// however late, is a replay.
func InboundVerifiedSubject(tenant, recipientPersonID, envelopeID string) (string, error) {
	return bus.Subject(Inbound, tenant, recipientPersonID, InboundVerified, envelopeID)
}

// InboundVerifiedFilter is every verified inbound envelope of every tenant.
func InboundVerifiedFilter() string { return pattern(Inbound, "*", "*", InboundVerified, "*") }

// InboundRefusedSubject is the subject of a refused request for a
// destination tenant hosted here; id names the request (a digest of it).
func InboundRefusedSubject(tenant, id string) (string, error) {
	return bus.Subject(Inbound, tenant, InboundRefused, id)
}

// InboundRefusedFilter is every refused request of one tenant.
func InboundRefusedFilter(tenant string) string {
	return pattern(Inbound, bus.TenantToken(tenant), InboundRefused, "*")
}

// OutboundStatusSubject is the subject of the delivery status of an
// envelope sent to another broker; each change is appended, the last one
// is the current status.
func OutboundStatusSubject(tenant, senderPersonID, envelopeID string) (string, error) {
	return bus.Subject(Inbound, tenant, senderPersonID, InboundStatus, envelopeID)
}

// The fifth token of an outbox subject alp.outbox.<tenant>.<remote>.<kind>.<envelope>.
const (
	OutboxEnvelope = "envelope"
	OutboxReceipt  = "receipt"
	OutboxCosign   = "cosign"
)

// OutboxSubject is the subject of one outbox item: what kind of item,
// for which envelope, to which remote domain. One item per subject (the
// work queue's dedupe by Nats-Msg-Id covers a retried publish).
func OutboxSubject(tenant, remoteDomain, kind, envelopeID string) (string, error) {
	return bus.Subject(Outbox, tenant, bus.TenantToken(remoteDomain), kind, envelopeID)
}

// The fourth token of an approvals subject:
// alp.approvals.<tenant>.<person>.item.<item> (ApprovalRequested, then
// ApprovalDecided), alp.approvals.<tenant>.<person>.rule.<rule>
// (StandingRuleCreated, then StandingRuleRevoked) and
// alp.approvals.<tenant>.<person>.notify.<item>.<channel>
// (NotificationAttempted).
const (
	ApprovalItem   = "item"
	ApprovalRule   = "rule"
	ApprovalNotify = "notify"
)

// ApprovalItemSubject is the subject of one item waiting for a person: its
// request, then its one decision (appended with the expected last sequence,
// so the first decision wins).
func ApprovalItemSubject(tenant, personID, itemID string) (string, error) {
	return bus.Subject(Approvals, tenant, personID, ApprovalItem, itemID)
}

// ApprovalItemFilter is every approval item of every tenant.
func ApprovalItemFilter() string { return pattern(Approvals, "*", "*", ApprovalItem, "*") }

// PersonApprovalItemsFilter is every approval item of one person.
func PersonApprovalItemsFilter(tenant, personID string) string {
	return pattern(Approvals, bus.TenantToken(tenant), personID, ApprovalItem, "*")
}

// StandingRuleSubject is the subject of one standing rule ("approve
// always"): its creation, then its revocation.
func StandingRuleSubject(tenant, personID, ruleID string) (string, error) {
	return bus.Subject(Approvals, tenant, personID, ApprovalRule, ruleID)
}

// StandingRuleFilter is every standing rule of every tenant.
func StandingRuleFilter() string { return pattern(Approvals, "*", "*", ApprovalRule, "*") }

// NotificationSubject is the subject of the notifications about one item
// on one channel ("webhook", "email"): every attempt is appended.
func NotificationSubject(tenant, personID, itemID, channel string) (string, error) {
	return bus.Subject(Approvals, tenant, personID, ApprovalNotify, itemID, channel)
}

// LedgerSubject is the subject of one person's log:
// alp.ledger.<tenant>.<person>.
func LedgerSubject(tenant, personID string) (string, error) {
	return bus.Subject(Ledger, tenant, personID)
}

// Aggregates of the identity stream, the fourth token of its subjects
// alp.identity.<tenant token>.<aggregate>.<id>. Identity writes them all;
// every role following the identity projection (internal/identitystore)
// reads them, and the ledger's work queue takes the erasures.
const (
	// IdentityPerson: a person's binding, roles and revocations (id: the
	// person id).
	IdentityPerson = "person"
	// IdentityIdPAccount: an earlier version's binding, on the IdP
	// account's subject (id: a hash of issuer and subject).
	IdentityIdPAccount = "idp"
	// IdentityClient: an OAuth client's registration and life (id: a
	// token of the client id).
	IdentityClient = "client"
	// IdentityGrant: a grant (consent), its refresh tokens and revocation.
	IdentityGrant = "grant"
	// IdentityPAT: a personal access token and its revocation.
	IdentityPAT = "pat"
	// IdentityErasure: a person's erasure tombstone (id: the person id).
	IdentityErasure = "erasure"
	// IdentityKeys: a tenant key's lifecycle (id: the key id).
	IdentityKeys = "keys"
	// IdentitySecret: a sealed secret identity keeps (id: its name).
	IdentitySecret = "secret"
	// IdentityIdPToken: a person's stored IdP refresh token (id: the
	// person id).
	IdentityIdPToken = "idptoken"
)

// IdentitySubject is the subject of one identity aggregate:
// alp.identity.<tenant>.<aggregate>.<id>.
func IdentitySubject(tenant, aggregate, id string) (string, error) {
	return bus.Subject(Identity, tenant, aggregate, id)
}

// IdentityFilter is every aggregate of one kind of a tenant:
// alp.identity.<tenant token>.<aggregate>.*.
func IdentityFilter(tenant, aggregate string) string {
	return pattern(Identity, bus.TenantToken(tenant), aggregate, "*")
}

// ParseIdentitySubject splits alp.identity.<tenant token>.<aggregate>.<id>;
// false for any other subject.
func ParseIdentitySubject(subject string) (tenantToken, aggregate, id string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0] != bus.SubjectPrefix || parts[1] != Identity {
		return "", "", "", false
	}
	return parts[2], parts[3], parts[4], true
}

// Aggregates of the policy stream, the fourth token of its subjects
// alp.policy.<tenant token>.<aggregate>.<id>. Policy writes and follows
// them (services/policy/relationships).
const (
	// PolicyConnection: one connection between two parties (id: the
	// connection id, a hash of the pair).
	PolicyConnection = "conn"
	// PolicyBlocks: one person's block list (id: the person id).
	PolicyBlocks = "block"
	// PolicyOrgRule: one pre-approved relationship of the organization
	// (id: the rule id, a hash of the rule).
	PolicyOrgRule = "org"
)

// PolicyType is the aggregate of one organization's message type on the
// policy stream (internal/msgtypes/typestore). Its id is PolicyTypeID of
// the type name: names hold '/' and '.', which no subject token may. Only
// policy reads it for now (natsauth's readers); the other roles that
// validate bodies will follow these subjects alone (PolicyTypeFilter).
const PolicyType = "type"

// PolicyTypeID is the subject id of the message type called name: a hash
// token, so one name has one subject and its first registration can be
// appended with "nothing on this subject yet" as expectation.
func PolicyTypeID(name string) string { return "t" + bus.HashID("message_type", name) }

// PolicyTypeFilter is every message type of one tenant:
// alp.policy.<tenant token>.type.*.
func PolicyTypeFilter(tenant string) string { return PolicyAggregateFilter(tenant, PolicyType) }

// PolicyAggregateFilter is every subject of one five-token policy
// aggregate of one tenant, alp.policy.<tenant token>.<aggregate>.*, so
// each store on the shared policy stream reads its own events only.
func PolicyAggregateFilter(tenant, aggregate string) string {
	return pattern(Policy, bus.TenantToken(tenant), aggregate, "*")
}

// PolicyRules is the aggregate of the policy stream holding one party's
// Cedar rule set (services/policy/rulestore). Its subjects have one token
// more than the others: alp.policy.<tenant token>.rules.<party>.<owner>,
// the owner being the tenant's token for an organization party and the
// person id for a person party.
const PolicyRules = "rules"

// PolicyRulesSubject is the subject of one rule set:
// alp.policy.<tenant>.rules.<party>.<owner token>.
func PolicyRulesSubject(tenant, party, ownerToken string) (string, error) {
	return bus.Subject(Policy, tenant, PolicyRules, party, ownerToken)
}

// PolicyRulesFilter is every rule set of one tenant:
// alp.policy.<tenant token>.rules.>.
func PolicyRulesFilter(tenant string) string {
	return pattern(Policy, bus.TenantToken(tenant), PolicyRules, ">")
}

// ParsePolicyRulesSubject splits
// alp.policy.<tenant token>.rules.<party>.<owner token>; false for any
// other subject.
func ParsePolicyRulesSubject(subject string) (tenantToken, party, ownerToken string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 6 || parts[0] != bus.SubjectPrefix || parts[1] != Policy || parts[3] != PolicyRules {
		return "", "", "", false
	}
	return parts[2], parts[4], parts[5], true
}

// PolicySubject is the subject of one policy aggregate:
// alp.policy.<tenant>.<aggregate>.<id>.
func PolicySubject(tenant, aggregate, id string) (string, error) {
	return bus.Subject(Policy, tenant, aggregate, id)
}

// ParsePolicySubject splits alp.policy.<tenant token>.<aggregate>.<id>;
// false for any other subject.
func ParsePolicySubject(subject string) (tenantToken, aggregate, id string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 || parts[0] != bus.SubjectPrefix || parts[1] != Policy {
		return "", "", "", false
	}
	return parts[2], parts[3], parts[4], true
}

// ProbeSubject is where service of broker namespace ns answers core-NATS
// probes (request/reply, never stored in a stream):
// alp.probe.<ns>.<service>; service "*" is every service's.
func ProbeSubject(ns, service string) string {
	return fmt.Sprintf("%s.probe.%s.%s", bus.SubjectPrefix, ns, service)
}
