package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// DeadLetterStream is the name of the stream every consumer of a broker
// shares for its dead letters.
const DeadLetterStream = "deadletter"

// DeadLetterSubject is where consumer durable's dead letters go.
func (b *Bus) DeadLetterSubject(durable string) string {
	return DeadLetterSubjectIn(b.opts.Namespace, durable)
}

// DeadLetterSubjectIn is where consumer durable of broker namespace ns
// puts its dead letters: alp.deadletter.<ns>.<durable>. The NATS
// permissions (internal/natsauth) allow each consumer exactly this subject.
func DeadLetterSubjectIn(ns, durable string) string {
	return fmt.Sprintf("%s.deadletter.%s.%s", SubjectPrefix, ns, durable)
}

func (b *Bus) deadLetterSpec() StreamSpec {
	return StreamSpec{
		Name:        DeadLetterStream,
		Description: "Events a consumer could not handle after MaxDeliver attempts, with the failure in headers.",
		Subjects:    []string{fmt.Sprintf("%s.deadletter.%s.>", SubjectPrefix, b.opts.Namespace)},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      b.opts.DeadLetterMaxAge,
	}
}

// EnsureShared creates the dead-letter stream. Every service that
// consumes calls it; it is idempotent.
func (b *Bus) EnsureShared(ctx context.Context) error {
	_, err := b.EnsureStream(ctx, b.deadLetterSpec())
	return err
}
