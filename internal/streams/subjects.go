package streams

import "github.com/alpd-project/alpd/internal/bus"

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
