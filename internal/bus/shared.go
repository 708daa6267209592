package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Names of the stream and bucket every consumer of a broker shares.
const (
	DeadLetterStream = "deadletter"
	SeenBucket       = "seen"
)

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

func (b *Bus) seenBucketName() string { return b.StreamName(SeenBucket) }

// EnsureShared creates the dead-letter stream and the consumers' seen-set
// bucket. Every service that consumes calls it; it is idempotent.
func (b *Bus) EnsureShared(ctx context.Context) error {
	if _, err := b.EnsureStream(ctx, b.deadLetterSpec()); err != nil {
		return err
	}
	_, err := b.seenBucket(ctx)
	return err
}

func (b *Bus) seenBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      b.seenBucketName(),
		Description: "Source event ids each durable consumer has handled (idempotency beyond the dedupe window).",
		History:     1,
		TTL:         b.opts.SeenTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    b.opts.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: seen-set bucket %s: %w", b.seenBucketName(), err)
	}
	return kv, nil
}
