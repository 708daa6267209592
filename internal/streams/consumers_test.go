package streams

import (
	"maps"
	"slices"
	"strconv"
	"testing"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/envelope"
)

// TestLedgerWorkPartitions: the table's ledger work queue renders the
// subject transforms and partition consumers the ledger has always run.
func TestLedgerWorkPartitions(t *testing.T) {
	work, _ := ByName(LedgerWork)
	spec := work.Spec([]string{"example.org"}, Limits{})
	wantSources := map[string]string{Send: "alp.send.*.*.*", Decided: "alp.decided.*.*.*", Deliver: "alp.deliver.*.*.*", Identity: "alp.identity.*.erasure.*", Inbox: "alp.inbox.*.*.ack.*.*", Inbound: "alp.inbound.*.*.status.*", Approvals: "alp.approvals.*.*.*.*"}
	if !maps.Equal(spec.Sources, wantSources) {
		t.Errorf("sources %v, want %v", spec.Sources, wantSources)
	}
	wantTransforms := map[string]string{
		Send:      "alp.send.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(8,1,2)}}",
		Decided:   "alp.decided.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(8,1,2)}}",
		Deliver:   "alp.deliver.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(8,1,2)}}",
		Identity:  "alp.identity.{{wildcard(1)}}.erasure.{{wildcard(2)}}.{{partition(8,1,2)}}",
		Inbox:     "alp.inbox.{{wildcard(1)}}.{{wildcard(2)}}.ack.{{wildcard(3)}}.{{wildcard(4)}}.{{partition(8,1,2)}}",
		Inbound:   "alp.inbound.{{wildcard(1)}}.{{wildcard(2)}}.status.{{wildcard(3)}}.{{partition(8,1,2)}}",
		Approvals: "alp.approvals.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.{{partition(8,1,2)}}",
	}
	if !maps.Equal(spec.Transforms, wantTransforms) {
		t.Errorf("transforms %v, want %v", spec.Transforms, wantTransforms)
	}
	if got := work.WithPartitions(3).Spec(nil, Limits{}).Transforms[Send]; got != "alp.send.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{partition(3,1,2)}}" {
		t.Errorf("3 partitions: %s", got)
	}
	if send, _ := ByName(Send); send.Spec(nil, Limits{}).Transforms != nil || send.WithPartitions(3).Partitions != 0 {
		t.Error("the send log, which policy reads, is not partitioned")
	}

	ledger := OwnedConsumers(alpv1.Role_ROLE_LEDGER, 0)
	if len(ledger) != LedgerPartitions {
		t.Fatalf("%d ledger consumers, want %d", len(ledger), LedgerPartitions)
	}
	for p, c := range ledger {
		n := strconv.Itoa(p)
		want := Consumer{Durable: "ledger_p" + n, Stream: LedgerWork,
			FilterSubjects: []string{"alp.send.*.*.*." + n, "alp.decided.*.*.*." + n, "alp.deliver.*.*.*." + n, "alp.identity.*.erasure.*." + n, "alp.inbox.*.*.ack.*.*." + n, "alp.inbound.*.*.status.*." + n, "alp.approvals.*.*.*.*." + n},
			Owner:          alpv1.Role_ROLE_LEDGER, Kind: PartitionConsumer}
		if c.Durable != want.Durable || c.Stream != want.Stream || !slices.Equal(c.FilterSubjects, want.FilterSubjects) ||
			c.Owner != want.Owner || c.Kind != want.Kind {
			t.Errorf("partition %d: %+v, want %+v", p, c, want)
		}
	}
	if n := len(OwnedConsumers(alpv1.Role_ROLE_LEDGER, 2)); n != 2 {
		t.Errorf("a ledger with 2 partitions runs %d consumers", n)
	}
	policy := OwnedConsumers(alpv1.Role_ROLE_POLICY, 2)
	if len(policy) != 3 || policy[0].Durable != "policy" || policy[0].Stream != Send || policy[0].FilterSubjects != nil ||
		policy[1].Durable != PolicyInbound || policy[1].Stream != Inbound || !slices.Equal(policy[1].FilterSubjects, []string{"alp.inbound.*.*.verified.*"}) ||
		policy[2].Durable != PolicyApprovals || policy[2].Stream != Approvals || !slices.Equal(policy[2].FilterSubjects, []string{"alp.approvals.*.*.item.*"}) {
		t.Errorf("policy consumers %+v, want one on the send log, one on federation's verified envelopes and one on approvals' items", policy)
	}
}

// TestConsumersAreConsistent: every consumer has a name NATS takes, once,
// and reads a stream of the table; a partition consumer reads its
// partition of a partitioned queue.
func TestConsumersAreConsistent(t *testing.T) {
	seen := map[string]bool{}
	partition := map[string]int{}
	for _, c := range Consumers() {
		if err := bus.CheckToken(c.Durable); err != nil || seen[c.Durable] {
			t.Errorf("durable %q: %v, twice %v", c.Durable, err, seen[c.Durable])
		}
		seen[c.Durable] = true
		s, ok := ByName(c.Stream)
		if !ok {
			t.Errorf("%s reads unknown stream %s", c.Durable, c.Stream)
			continue
		}
		if !slices.Contains(envelope.Roles(), c.Owner) {
			t.Errorf("%s is run by %s, not a service role", c.Durable, c.Owner)
		}
		switch c.Kind {
		case WorkConsumer:
			if s.Partitions != 0 {
				t.Errorf("%s: work consumer on the partitioned %s", c.Durable, s.Name)
			}
		case PartitionConsumer:
			p := partition[c.Stream]
			partition[c.Stream]++
			if !slices.Equal(c.FilterSubjects, s.PartitionFilters(p)) {
				t.Errorf("%s: filters %v, want partition %d's %v", c.Durable, c.FilterSubjects, p, s.PartitionFilters(p))
			}
		default:
			t.Errorf("%s has no kind", c.Durable)
		}
	}
	for name, n := range partition {
		if s, _ := ByName(name); n != s.Partitions {
			t.Errorf("%s has %d partitions and %d partition consumers", name, s.Partitions, n)
		}
	}
}
