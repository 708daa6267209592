package jsstore

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	appended      prometheus.Counter
	duplicates    prometheus.Counter
	conflicts     prometheus.Counter
	batchSize     prometheus.Histogram
	appendSeconds prometheus.Histogram
	loads         *prometheus.CounterVec
	replayed      prometheus.Counter
	trees         prometheus.Gauge
	evictions     prometheus.Counter
	snapshots     prometheus.Counter
	snapshotFails prometheus.Counter
	checkpoints   prometheus.Counter
	cpRefused     prometheus.Counter
	cpFailures    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		appended: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_entries_appended_total", Help: "Leaves appended to persons' ledgers.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_append_duplicates_total", Help: "Appends found already stored (a retry after a lost ack, or a redelivered source event).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_append_conflicts_total", Help: "Appends refused because the log had grown (another writer came first); retried after reloading the log head.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "alpd_ledger_append_batch_size", Help: "Leaves per atomic append to one log.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "alpd_ledger_append_seconds", Help: "Time to append one batch, conflicts included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "alpd_ledger_tree_loads_total", Help: "Trees loaded into memory, by how: snapshot (KV tiles plus the stream's tail), empty, rebuilt (from the stream, the KV state being stale or missing).",
		}, []string{"from"}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_leaves_replayed_total", Help: "Leaves read back from the stream to bring a tree up to date.",
		}),
		trees: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "alpd_ledger_trees_loaded", Help: "Persons' trees held in memory.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_tree_evictions_total", Help: "Trees dropped from memory (least recently used).",
		}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_tree_snapshots_total", Help: "Tree snapshots written to KV.",
		}),
		snapshotFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_tree_snapshot_failures_total", Help: "Tree snapshot writes that failed (retried at the next round).",
		}),
		checkpoints: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_checkpoints_signed_total", Help: "Checkpoints signed.",
		}),
		cpRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_checkpoints_refused_total", Help: "Checkpoints NOT signed because the tree disagrees with the previous checkpoint of the log (must stay 0).",
		}),
		cpFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "alpd_ledger_checkpoint_failures_total", Help: "Checkpoint rounds for one log that failed (retried at the next round).",
		}),
	}
	for _, c := range []prometheus.Collector{m.appended, m.duplicates, m.conflicts, m.batchSize, m.appendSeconds, m.loads,
		m.replayed, m.trees, m.evictions, m.snapshots, m.snapshotFails, m.checkpoints, m.cpRefused, m.cpFailures} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("ledger: metrics already registered on this registerer (one ledger store per registerer): %w", err)
			}
			return nil, fmt.Errorf("ledger: register metrics: %w", err)
		}
	}
	return m, nil
}
