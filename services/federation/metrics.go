package federation

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are federation's counters (the broker's registerer adds its
// name as a label).
type metrics struct {
	queued, expired, breakerOpen, retries, received, duplicates, receipts, unrecorded prometheus.Counter
	sent, refusedByRemote, failed, refused, cosigned                                  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (metrics, error) {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "alpd_federation_" + name, Help: help})
	}
	vec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "alpd_federation_" + name, Help: help}, []string{label})
	}
	m := metrics{
		queued:          counter("queued_total", "Envelopes queued for remote brokers."),
		expired:         counter("outbox_expired_total", "Outbox items that failed for being older than federation.outbox_max_age."),
		breakerOpen:     counter("breaker_open_total", "Outbox items postponed because their remote's circuit breaker was open."),
		retries:         counter("retries_total", "Failed deliveries to remote brokers that will be retried."),
		received:        counter("received_total", "Envelopes from remote brokers that passed every check."),
		duplicates:      counter("duplicates_total", "Envelopes a remote broker sent again, accepted again and neither stored nor delivered twice."),
		receipts:        counter("receipts_total", "Receipt notices from remote brokers recorded."),
		unrecorded:      counter("refusals_unrecorded_total", "Refusals beyond the recording rate: logged and counted, not recorded on the log."),
		sent:            vec("sent_total", "Outbox items delivered to remote brokers, by kind.", "kind"),
		refusedByRemote: vec("refused_by_remote_total", "Outbox items remote brokers refused, by their code.", "code"),
		failed:          vec("failed_total", "Envelopes that could not be delivered, by reason.", "code"),
		refused:         vec("refused_total", "Requests from remote brokers refused, by the failed check.", "code"),
		cosigned:        vec("cosignatures_total", "Checkpoint cosignatures: of logs here by remote witnesses, recorded (side=log), and of remote logs by this broker's domains (side=witness).", "side"),
	}
	for _, c := range []prometheus.Collector{m.queued, m.expired, m.breakerOpen, m.retries, m.received, m.duplicates, m.receipts, m.unrecorded, m.sent, m.refusedByRemote, m.failed, m.refused, m.cosigned} {
		if err := reg.Register(c); err != nil {
			return m, fmt.Errorf("federation: register metrics: %w", err)
		}
	}
	return m, nil
}
