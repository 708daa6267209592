// Package streams is alpd's vocabulary between services: the one table of
// its JetStream streams (who owns each, which subjects it holds, how long
// it keeps them, which streams feed a work queue and how), the one table
// of durable consumers (consumers.go), and the builders and filters of
// every subject one service publishes and another reads (subjects.go).
// Services create the streams and consumers they own from these tables at
// start-up; internal/natsauth derives every role's NATS permissions from
// them, and docs/architecture.md renders the stream table for operators.
// No subject or consumer name is spelled outside this package
// (TestNoLiteralSubjects).
package streams

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
)

// Retention classes an operator configures.
type Limits struct {
	// EventMaxAge bounds event logs that feed work (send, decided, inbound);
	// 0 keeps them forever.
	EventMaxAge time.Duration
	// WorkMaxAge bounds work queues: an item older than this is dropped.
	WorkMaxAge time.Duration
	// InboxMaxAge is how long a person's inbox keeps an item and its
	// acknowledgements; 0 keeps them forever.
	InboxMaxAge time.Duration
}

// Names of the streams (without the broker namespace prefix).
const (
	Send    = "send"
	Decided = "decided"
	// Deliver holds policy's recipient-side decisions (Deliverable), one
	// subject per recipient and envelope.
	Deliver   = "deliver"
	Inbound   = "inbound"
	Outbox    = "outbox"
	Identity  = "identity"
	Ledger    = "ledger"
	Approvals = "approvals"
	// Policy is policy's own state: relationships
	// (services/policy/relationships).
	Policy = "policy"
	// Inbox is ingress's inbox of each person: the items delivered to
	// them and each of their agents' acknowledgements.
	Inbox = "inbox"
	// LedgerWork is the ledger writers' queue, fed from send, decided,
	// deliver and identity's erasures, partitioned by person (see
	// LedgerPartitions).
	LedgerWork = "ledger_work"
)

// LedgerPartitions is the default number of partitions of the ledger's
// work queue: persons are spread over them by a hash of tenant and person
// (the NATS partition() subject mapping), one durable consumer each, so
// one person's events always meet the same writer. The NATS permissions
// (internal/natsauth) allow this many ledger consumers.
const LedgerPartitions = 8

// IdentityKinds are the event bodies the identity stream carries: key
// lifecycle, erasure tombstones and the identity state of
// internal/identitystore (people, clients, grants, tokens, revocations).
func IdentityKinds() []string {
	return []string{
		"key_lifecycle", "data_key_destroyed",
		"person_bound", "person_updated", "person_agents_revoked",
		"client_registered", "vendor_attestation_bound",
		"client_first_used", "dynamic_client_expired",
		"grant_issued", "refresh_token_rotated", "grant_revoked",
		"personal_access_token_issued", "personal_access_token_revoked",
		"sealed_secret_created", "idp_token_stored",
		"person_rebound", "person_sessions_revoked",
	}
}

// PolicyKinds are the event bodies the policy stream carries: the
// relationships of services/policy/relationships, the organizations'
// message types of internal/msgtypes/typestore and the rule sets of
// services/policy/rulestore.
func PolicyKinds() []string {
	return []string{
		"connection_requested", "connection_accepted", "connection_declined",
		"person_blocked", "person_unblocked", "org_relationship_set",
		// Organizations' message types.
		"message_type_registered",
		// Rule sets (services/policy/rulestore).
		"rule_set_version_stored",
	}
}

// Stream describes one stream of the table.
type Stream struct {
	Name  string
	Owner alpv1.Role
	// Kind is the subject token after "alp."; empty for a sourced queue.
	Kind string
	// EventKinds are the event bodies (Event.body field names) it carries.
	EventKinds []string
	Retention  jetstream.RetentionPolicy
	MaxAge     func(Limits) time.Duration
	AppendOnly bool
	// PurgedOnErasure: the owner purges a person's subjects when the
	// person is erased (their metadata goes too, not only the sealed
	// bodies), so its NATS user may purge the stream.
	PurgedOnErasure bool
	// Sources feed a work queue from other streams of the table.
	Sources []Source
	// Partitions, when set, spreads a sourced queue over that many
	// partitions: NATS stores each sourced message with its partition
	// appended as a last token (a subject transform on each source),
	// computed from the tokens that the wildcards PartitionBy (1-based, in
	// each source's filter) stand for. Messages alike in those tokens share
	// a partition and so its one consumer (PartitionFilters).
	Partitions  int
	PartitionBy []int
	Description string
}

// Source is one stream feeding a queue.
type Source struct {
	// Stream is the source's name in the table.
	Stream string
	// Filter selects the subjects the queue takes from it.
	Filter string
}

func forever(Limits) time.Duration  { return 0 }
func events(l Limits) time.Duration { return l.EventMaxAge }
func work(l Limits) time.Duration   { return l.WorkMaxAge }
func inbox(l Limits) time.Duration  { return l.InboxMaxAge }

// Table lists every stream of a broker.
func Table() []Stream {
	return []Stream{
		{Name: Send, Owner: alpv1.Role_ROLE_INGRESS, Kind: "send", EventKinds: []string{"send_requested"},
			Retention: jetstream.LimitsPolicy, MaxAge: events,
			Description: "SendRequested: agents' requests to send, bodies sealed with the sender's data key."},
		{Name: Decided, Owner: alpv1.Role_ROLE_POLICY, Kind: "decided", EventKinds: []string{"decided"},
			Retention: jetstream.LimitsPolicy, MaxAge: events,
			Description: "Decided: policy's per-field verdicts."},
		{Name: Deliver, Owner: alpv1.Role_ROLE_POLICY, Kind: "deliver", EventKinds: []string{"deliverable"},
			Retention: jetstream.LimitsPolicy, MaxAge: events,
			Description: "Deliverable: policy's recipient-side verdicts for recipients on this broker, each trust class's view and the held items, sealed with the recipient's data key."},
		{Name: Inbox, Owner: alpv1.Role_ROLE_INGRESS, Kind: "inbox", EventKinds: []string{"deliverable", "inbox_acked", "approval_decided"},
			Retention: jetstream.LimitsPolicy, MaxAge: inbox, PurgedOnErasure: true,
			Description: "Inboxes: each person's items (Deliverable, views sealed with the person's data key) on alp.inbox.<tenant>.<person>.item.<envelope>, each agent's acknowledgements (InboxAcked) on alp.inbox.<tenant>.<person>.ack.<agent>.<envelope> (….<held id> again after a release), and the person's decisions on held items (ApprovalDecided) on alp.inbox.<tenant>.<person>.decision.<envelope>.<held id>."},
		{Name: Inbound, Owner: alpv1.Role_ROLE_FEDERATION, Kind: "inbound", EventKinds: []string{"inbound_verified", "inbound_refused", "outbound_status"},
			Retention: jetstream.LimitsPolicy, MaxAge: events,
			Description: "Federation's log: envelopes from remote brokers that passed every check (InboundVerified, alp.inbound.<tenant>.<person>.verified.<envelope>, written once: the dedupe by envelope id), requests refused (InboundRefused, alp.inbound.<tenant>.refused.<digest>), and the delivery status of envelopes sent to remote brokers (OutboundStatus, alp.inbound.<tenant>.<person>.status.<envelope>)."},
		{Name: Outbox, Owner: alpv1.Role_ROLE_FEDERATION, Kind: "outbox", EventKinds: []string{"outbox_item"},
			Retention: jetstream.WorkQueuePolicy, MaxAge: work,
			Description: "Federation outbox: envelopes, receipt notices and cosign requests waiting to be sent to remote brokers (work queue, alp.outbox.<tenant>.<remote domain>.<kind>.<envelope>)."},
		{Name: Identity, Owner: alpv1.Role_ROLE_IDENTITY, Kind: "identity", EventKinds: IdentityKinds(),
			Retention: jetstream.LimitsPolicy, MaxAge: forever,
			Description: "Identity state: people, agents, clients, grants, revocations, public keys and key lifecycle."},
		{Name: Ledger, Owner: alpv1.Role_ROLE_LEDGER, Kind: "ledger", EventKinds: []string{"ledger_entry_appended"},
			Retention: jetstream.LimitsPolicy, MaxAge: forever, AppendOnly: true,
			Description: "Per-person ledgers: one Merkle log per person on alp.ledger.<tenant>.<person> (append-only: deletes and purges denied)."},
		{Name: Policy, Owner: alpv1.Role_ROLE_POLICY, Kind: "policy", EventKinds: PolicyKinds(),
			Retention: jetstream.LimitsPolicy, MaxAge: forever,
			Description: "Policy state: connections between people and remote addresses, people's blocks, organizations' pre-approved relationships and message types, parties' rule sets."},
		{Name: Approvals, Owner: alpv1.Role_ROLE_APPROVALS, Kind: "approvals",
			EventKinds: []string{"approval_requested", "approval_decided", "standing_rule_created", "standing_rule_revoked", "notification_attempted"},
			Retention:  jetstream.LimitsPolicy, MaxAge: forever,
			Description: "Approvals: each item waiting for a person and its one decision (alp.approvals.<tenant>.<person>.item.<item>, held values sealed with the person's data key), their standing rules (….rule.<rule>) and the notifications sent about items (….notify.<item>.<channel>)."},
		// Send subjects are alp.send.<tenant>.<person>.<envelope>, decisions
		// alp.decided.<tenant>.<sender>.<envelope>, deliverables
		// alp.deliver.<tenant>.<recipient>.<envelope>, erasures
		// alp.identity.<tenant>.erasure.<person>, agents' acknowledgements
		// alp.inbox.<tenant>.<person>.ack.<agent>.<envelope>, federation's delivery
		// status alp.inbound.<tenant>.<person>.status.<envelope>: wildcards 1 and 2 are
		// tenant and person in all, so all of a person's events meet in one
		// partition (queued as alp.send.<tenant>.<person>.<envelope>.<p>).
		{Name: LedgerWork, Owner: alpv1.Role_ROLE_LEDGER, EventKinds: []string{"send_requested", "decided", "deliverable", "data_key_destroyed", "inbox_acked", "outbound_status",
			"approval_requested", "approval_decided", "standing_rule_created", "standing_rule_revoked"},
			Retention: jetstream.WorkQueuePolicy, MaxAge: events,
			Sources: []Source{
				{Stream: Send, Filter: pattern(Send, "*", "*", "*")},
				{Stream: Decided, Filter: pattern(Decided, "*", "*", "*")},
				{Stream: Deliver, Filter: pattern(Deliver, "*", "*", "*")},
				{Stream: Identity, Filter: pattern(Identity, "*", IdentityErasure, "*")},
				{Stream: Inbox, Filter: pattern(Inbox, "*", "*", InboxAck, "*", "*")},
				{Stream: Inbound, Filter: pattern(Inbound, "*", "*", InboundStatus, "*")},
				// Items and standing rules (alp.approvals.<t>.<p>.item|rule.<id>),
				// not the notifications (one token longer).
				{Stream: Approvals, Filter: pattern(Approvals, "*", "*", "*", "*")},
			},
			Partitions: LedgerPartitions, PartitionBy: []int{1, 2},
			Description: "Ledger writers' queue, sourced from send, decided, deliver, identity's erasures, agents' inbox acknowledgements, federation's delivery status and approvals' items and standing rules, partitioned by person (one consumer per partition, shared by ledger replicas)."},
	}
}

// Spec renders a stream for a broker hosting tenants.
func (s Stream) Spec(tenants []string, l Limits) bus.StreamSpec {
	spec := bus.StreamSpec{
		Name: s.Name, Retention: s.Retention, MaxAge: s.MaxAge(l),
		DenyDelete: s.AppendOnly, DenyPurge: s.AppendOnly,
		Description: s.Description,
	}
	if s.Kind != "" {
		for _, t := range tenants {
			spec.Subjects = append(spec.Subjects, TenantFilter(s.Kind, t))
		}
	}
	for _, src := range s.Sources {
		if spec.Sources == nil {
			spec.Sources = map[string]string{}
		}
		spec.Sources[src.Stream] = src.Filter
		if s.Partitions > 0 {
			if spec.Transforms == nil {
				spec.Transforms = map[string]string{}
			}
			spec.Transforms[src.Stream] = s.partitionTransform(src.Filter)
		}
	}
	return spec
}

// partitionTransform is the destination of the subject transform that
// appends the partition to the subjects of a source: the filter with each
// wildcard kept ({{wildcard(i)}}), then {{partition(n,PartitionBy...)}}:
// alp.send.*.*.* → alp.send.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(8,1,2)}}.
func (s Stream) partitionTransform(filter string) string {
	tokens := strings.Split(filter, ".")
	w := 0
	for i, t := range tokens {
		if t == "*" {
			w++
			tokens[i] = fmt.Sprintf("{{wildcard(%d)}}", w)
		}
	}
	by := make([]string, len(s.PartitionBy))
	for i, p := range s.PartitionBy {
		by[i] = strconv.Itoa(p)
	}
	return strings.Join(tokens, ".") + fmt.Sprintf(".{{partition(%d,%s)}}", s.Partitions, strings.Join(by, ","))
}

// PartitionFilters are the subjects of partition p of a partitioned queue:
// each source's filter followed by the partition token.
func (s Stream) PartitionFilters(p int) []string {
	out := make([]string, len(s.Sources))
	for i, src := range s.Sources {
		out[i] = src.Filter + "." + strconv.Itoa(p)
	}
	return out
}

// WithPartitions is s spread over n partitions instead of the table's
// number; s itself for n <= 0 or a queue that is not partitioned. (The
// ledger's number of partitions is an option of the service.)
func (s Stream) WithPartitions(n int) Stream {
	if n > 0 && s.Partitions > 0 {
		s.Partitions = n
	}
	return s
}

// Owned returns the specs of the streams role owns.
func Owned(role alpv1.Role, tenants []string, l Limits) []bus.StreamSpec {
	var out []bus.StreamSpec
	for _, s := range Table() {
		if s.Owner == role {
			out = append(out, s.Spec(tenants, l))
		}
	}
	return out
}

// ByName finds a stream of the table.
func ByName(name string) (Stream, bool) {
	for _, s := range Table() {
		if s.Name == name {
			return s, true
		}
	}
	return Stream{}, false
}

// CheckProducer verifies that ev may stand on subject: the subject's stream
// is owned by the role the event names as producer, and that stream carries
// the event's kind. NATS permissions make the subject prove who published
// (only the owner role may publish there), so a role that lies about the
// producer, or puts a kind it may not produce on its own subject, is caught.
func CheckProducer(subject string, ev *alpv1.Event) error {
	parts := strings.SplitN(subject, ".", 3)
	if len(parts) < 3 || parts[0] != bus.SubjectPrefix {
		return fmt.Errorf("subject %q is not an alp subject", subject)
	}
	kind := bus.Kind(ev)
	role := ev.GetHeader().GetProducerRole()
	s, ok := bySubjectKind()[parts[1]]
	if !ok {
		return fmt.Errorf("subject %q belongs to no stream", subject)
	}
	if s.Owner != role {
		return fmt.Errorf("%s on %s claims producer %s, but only %s publishes there", kind, subject, role, s.Owner)
	}
	if !slices.Contains(s.EventKinds, kind) {
		return fmt.Errorf("%s may not publish %s events on %s", role, kind, subject)
	}
	return nil
}

// bySubjectKind is the table's streams that have subjects of their own,
// by the subject token after "alp.", built once: CheckProducer runs on
// every event every consumer and waiter reads.
var bySubjectKind = sync.OnceValue(func() map[string]Stream {
	m := map[string]Stream{}
	for _, s := range Table() {
		if _, dup := m[s.Kind]; s.Kind != "" && !dup {
			m[s.Kind] = s
		}
	}
	return m
})
