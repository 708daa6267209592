package bus

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	processed         *prometheus.CounterVec
	failures          *prometheus.CounterVec
	deadLetters       *prometheus.CounterVec
	repeats           *prometheus.CounterVec
	forbiddenProducer *prometheus.CounterVec
	lag               *prometheus.GaugeVec
	handleSeconds     *prometheus.HistogramVec
	publishSeconds    prometheus.Histogram
	publishFailures   prometheus.Counter
	publishDuplicates prometheus.Counter
	appendConflicts   prometheus.Counter
}

// consumerMetrics are one consumer's series, looked up once: the consumer
// touches several on every event.
type consumerMetrics struct {
	processed, failures, deadLetters, repeats, forbiddenProducer prometheus.Counter
	lag                                                          prometheus.Gauge
	handleSeconds                                                prometheus.Observer
}

func (m *metrics) of(consumer string) consumerMetrics {
	return consumerMetrics{
		processed: m.processed.WithLabelValues(consumer), failures: m.failures.WithLabelValues(consumer),
		deadLetters: m.deadLetters.WithLabelValues(consumer), repeats: m.repeats.WithLabelValues(consumer),
		forbiddenProducer: m.forbiddenProducer.WithLabelValues(consumer),
		lag:               m.lag.WithLabelValues(consumer), handleSeconds: m.handleSeconds.WithLabelValues(consumer),
	}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_bus_events_processed_total", Help: "Events a consumer handled successfully.",
		}, []string{"consumer"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_bus_event_failures_total", Help: "Handler failures (each attempt).",
		}, []string{"consumer"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_bus_dead_letters_total", Help: "Events moved to the dead-letter stream.",
		}, []string{"consumer"}),
		repeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_bus_possible_repeats_total", Help: "Deliveries handed to the handler as possible repeats (Delivery.Repeat: delivered before, or older than half the dedupe window).",
		}, []string{"consumer"}),
		forbiddenProducer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_bus_forbidden_producer_total", Help: "Events refused because their producer role may not produce them on that subject.",
		}, []string{"consumer"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "alpd_bus_consumer_lag", Help: "Messages pending for a consumer, as of its last delivery or poll.",
		}, []string{"consumer"}),
		handleSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "alpd_bus_handle_seconds", Help: "Time to handle one event.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"consumer"}),
		publishSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "alpd_bus_publish_seconds", Help: "Time from publish to stream ack.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_bus_publish_failures_total", Help: "Publishes that got no ack.",
		}),
		publishDuplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_bus_publish_duplicates_total", Help: "Publishes the server recognised as duplicates.",
		}),
		appendConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_bus_append_conflicts_total", Help: "Appends refused because another writer came first.",
		}),
	}
	for _, c := range []prometheus.Collector{m.processed, m.failures, m.deadLetters, m.repeats, m.forbiddenProducer, m.lag,
		m.handleSeconds, m.publishSeconds, m.publishFailures, m.publishDuplicates, m.appendConflicts} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("bus: metrics already registered on this registerer (one bus per registerer, or wrap it with a label): %w", err)
			}
			return nil, fmt.Errorf("bus: register metrics: %w", err)
		}
	}
	return m, nil
}
