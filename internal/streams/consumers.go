package streams

import (
	"fmt"
	"slices"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
)

// ConsumerKind says how a durable consumer shares its stream.
type ConsumerKind int

const (
	// WorkConsumer is one durable on a stream that every replica of its
	// owner pulls from; each message goes to one of them. On an event log
	// (policy on send) the log keeps the message for its other readers and
	// the consumer remembers what was acknowledged.
	WorkConsumer ConsumerKind = iota + 1
	// PartitionConsumer is one partition's durable of a partitioned queue:
	// it filters on that partition's subjects, so the events of one
	// partition are handled by one consumer, in stream order.
	PartitionConsumer
)

// Consumer is one durable consumer of a broker.
type Consumer struct {
	// Durable is its name without namespace; on the server it is
	// <NS>_<DURABLE>, and its dead letters go to
	// alp.deadletter.<ns>.<durable>.
	Durable string
	// Stream is the stream it reads (name without namespace).
	Stream string
	// FilterSubjects select what it takes from the stream; none: all.
	FilterSubjects []string
	// Owner is the role that runs it.
	Owner alpv1.Role
	Kind  ConsumerKind
}

// Consumers lists every durable consumer of a broker, partitioned queues
// with the table's number of partitions; the NATS permissions
// (internal/natsauth) allow exactly these.
func Consumers() []Consumer { return consumers(0) }

// OwnedConsumers are the durable consumers role runs, with partitioned
// queues spread over partitions partitions (0: the table's number).
func OwnedConsumers(role alpv1.Role, partitions int) []Consumer {
	var out []Consumer
	for _, c := range consumers(partitions) {
		if c.Owner == role {
			out = append(out, c)
		}
	}
	return out
}

// Ingress's durable consumers: filing deliverables into inboxes, and
// purging an erased person's inbox.
const (
	IngressInbox   = "ingress_inbox"
	IngressErasure = "ingress_erasure"
)

// Policy's durable consumer of envelopes from other brokers (the
// recipient side), and federation's: taking the sender side's cleared
// envelopes for remote recipients into the outbox, sending the outbox, and
// giving receipts for what arrived from other brokers.
const (
	PolicyInbound      = "policy_inbound"
	FederationOutbound = "federation_outbound"
	FederationOutbox   = "federation_outbox"
	FederationReceipts = "federation_receipts"
)

// Approvals' durable consumers: taking held items of deliverables as
// items for the person, and notifying them of new items. Ingress's and
// policy's: carrying out decisions (ingress releases held fields to the
// person's agents; policy answers connection requests).
const (
	ApprovalsHeld   = "approvals_held"
	ApprovalsNotify = "approvals_notify"
	IngressReleases = "ingress_releases"
	PolicyApprovals = "policy_approvals"
)

func consumers(partitions int) []Consumer {
	// Policy reads the send log directly, not a queue sourced from it: one
	// hop and one stored copy fewer on the way to a decision
	// (docs/operations.md, "Durability of each step").
	out := []Consumer{
		{Durable: "policy", Stream: Send, Owner: alpv1.Role_ROLE_POLICY, Kind: WorkConsumer},
		// Ingress files each Deliverable into the recipient's inbox.
		{Durable: IngressInbox, Stream: Deliver, Owner: alpv1.Role_ROLE_INGRESS, Kind: WorkConsumer},
		// Ingress purges an erased person's inbox.
		{Durable: IngressErasure, Stream: Identity, FilterSubjects: []string{pattern(Identity, "*", IdentityErasure, "*")},
			Owner: alpv1.Role_ROLE_INGRESS, Kind: WorkConsumer},
		// Policy decides the recipient side of what other brokers send.
		{Durable: PolicyInbound, Stream: Inbound, FilterSubjects: []string{InboundVerifiedFilter()},
			Owner: alpv1.Role_ROLE_POLICY, Kind: WorkConsumer},
		// Federation queues what the sender side cleared for remote
		// recipients, sends the outbox, and answers deliverables of remote
		// senders with a receipt.
		{Durable: FederationOutbound, Stream: Decided, Owner: alpv1.Role_ROLE_FEDERATION, Kind: WorkConsumer},
		{Durable: FederationOutbox, Stream: Outbox, Owner: alpv1.Role_ROLE_FEDERATION, Kind: WorkConsumer},
		{Durable: FederationReceipts, Stream: Deliver, Owner: alpv1.Role_ROLE_FEDERATION, Kind: WorkConsumer},
		// Approvals makes an item of each held item, and notifies the person.
		{Durable: ApprovalsHeld, Stream: Deliver, Owner: alpv1.Role_ROLE_APPROVALS, Kind: WorkConsumer},
		{Durable: ApprovalsNotify, Stream: Approvals, FilterSubjects: []string{ApprovalItemFilter()},
			Owner: alpv1.Role_ROLE_APPROVALS, Kind: WorkConsumer},
		// The decisions' effects: ingress delivers what was released,
		// policy answers connection requests.
		{Durable: IngressReleases, Stream: Approvals, FilterSubjects: []string{ApprovalItemFilter()},
			Owner: alpv1.Role_ROLE_INGRESS, Kind: WorkConsumer},
		{Durable: PolicyApprovals, Stream: Approvals, FilterSubjects: []string{ApprovalItemFilter()},
			Owner: alpv1.Role_ROLE_POLICY, Kind: WorkConsumer},
	}
	work, _ := ByName(LedgerWork)
	work = work.WithPartitions(partitions)
	for p := range work.Partitions {
		out = append(out, Consumer{Durable: fmt.Sprintf("ledger_p%d", p), Stream: LedgerWork,
			FilterSubjects: work.PartitionFilters(p), Owner: alpv1.Role_ROLE_LEDGER, Kind: PartitionConsumer})
	}
	return out
}

// Spec is the consumer's part of a bus consumer; the service adds how it
// runs it (workers, pending limits, the stream to bring back).
func (c Consumer) Spec() bus.ConsumerSpec {
	return bus.ConsumerSpec{Durable: c.Durable, Stream: c.Stream, FilterSubjects: slices.Clone(c.FilterSubjects)}
}
