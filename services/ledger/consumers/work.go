// Package consumers turns the events the ledger follows into leaves of the
// persons' logs: the partitioned work queue that feeds the writers, and the
// writer that handles each event.
//
// # One writer per log
//
// The ledger's work queue <NS>_LEDGER_WORK is a WorkQueue stream sourced
// from the streams the ledger reads (send requests, policy's decisions and
// deliverables, identity's erasures, agents' inbox acknowledgements).
// Each source carries a subject transform that appends the person's
// partition as a last token, computed by NATS itself with the
// partition(n, tenant, person) mapping (FNV-1a of the two tokens, modulo
// n); the stream table (internal/streams, LedgerWork) declares sources,
// partitions and consumers:
//
//	alp.send.<tenant>.<person>.<envelope>      → alp.send.<tenant>.<person>.<envelope>.<p>
//	alp.decided.<tenant>.<sender>.<envelope>   → alp.decided.<tenant>.<sender>.<envelope>.<p>
//	alp.deliver.<tenant>.<recipient>.<envelope> → alp.deliver.<tenant>.<recipient>.<envelope>.<p>
//	alp.identity.<tenant>.erasure.<person>     → alp.identity.<tenant>.erasure.<person>.<p>
//	alp.inbox.<tenant>.<recipient>.ack.<agent>.<envelope> → ….<envelope>.<p>
//
// Partition p has one durable consumer, <NS>_LEDGER_P<p>, filtering on the
// five subjects ending in .<p>, so every event of one person goes through
// one consumer, in stream order, and events of different persons are
// written in parallel. Replicas of the ledger share the consumers; the
// appends themselves never fork a log whoever makes them (jsstore), so
// sharing costs at most counted conflicts, never correctness.
//
// The original subject stays a prefix of the queued one, so the bus's
// producer check (streams.CheckProducer, by the subject's second token)
// works unchanged. The person's events keep their stream order within a
// partition when one worker handles it; with several workers (Options of
// the service) they are appended in the order they finish, each entry
// carrying its own time — except that a decision waits for its envelope's
// entry (Writer: policy.decided follows envelope.send_requested).
//
// Changing the number of partitions re-partitions new events only: change
// it while the queue is empty (the ledger's consumer lag is 0).
package consumers

import "github.com/alpd-project/alpd/internal/bus"

// Partition is the partition of a person among n, as NATS computes it for
// the work queue (FNV-1a 32 of tenant token and person id, modulo n).
func Partition(tenant, person string, n int) int {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for _, s := range []string{bus.TenantToken(tenant), person} {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= prime
		}
	}
	return int(h % uint32(n))
}
