// Package bus is alpd's event bus on NATS JetStream.
//
// Every state change in alpd is an alpv1.Event appended to a stream owned by
// the service that produces it. The package gives the services four things
// the raw jetstream API leaves to the caller:
//
//   - Stream ownership: EnsureStream creates a stream or updates it to the
//     configuration its owner declares at start-up (Dendrite's pattern).
//   - Idempotent publishing: every publish carries Nats-Msg-Id =
//     hash(source event id, kind), so a producer that retries, or re-runs
//     after a redelivery, stores nothing twice inside the dedupe window.
//   - Appends that never fork: Append uses the expected last subject sequence,
//     treats both conflict codes (10071 on R1, 10164 on R>1 streams) as a
//     conflict, and recognises a retry of an append that was already stored as
//     success (the server answers such a retry with a conflict, not a
//     duplicate ack).
//   - Supervised consumers: durable pull consumers that survive NATS restarts,
//     tell a handler when a delivery may repeat a handling the dedupe window
//     no longer covers (Delivery.Repeat), so it looks for its own effect
//     then and only then, and move a message that keeps failing to the
//     dead-letter stream after MaxDeliver attempts instead of crash-looping.
package bus
