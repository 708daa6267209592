package jsstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/natstest"
)

// BenchmarkAppendOnePerson measures appends to one person's log, with
// concurrent writers (grouped into atomic batches) and with one writer
// (one expected-sequence round trip per leaf), against the floor measured
// in the same run: raw JetStream async publishes of messages of the same
// size to a plain stream. It reports entries/s of both and their ratio
// ("ratio"; 1 = as fast as the raw publishes). sync=true runs the server
// with SyncAlways, as alpd's embedded NATS does.
//
//	go test -run '^$' -bench AppendOnePerson -benchtime 20000x ./services/ledger/storage/jsstore/
func BenchmarkAppendOnePerson(b *testing.B) {
	for _, sync := range []bool{false, true} {
		for _, writers := range []int{1, 64, 1024} {
			b.Run(fmt.Sprintf("sync=%v/writers=%d", sync, writers), func(b *testing.B) {
				benchAppend(b, sync, writers)
			})
		}
	}
}

func benchAppend(b *testing.B, syncAlways bool, writers int) {
	o := natstest.Options(b.TempDir())
	o.SyncAlways = syncAlways
	srv := natstest.RunServer(b, o)
	nc := natstest.Connect(b, srv)
	f := rigOn(b, nc)
	s := f.store(b, Options{MaxBatch: 1000, CheckpointInterval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)

	// The size of one leaf message, for the raw floor.
	probe := request("p1", "probe")
	leaf, _, _ := probe.Build(0)
	msg, _ := bus.NewMsg("x", s.ledgerEvent(&probe, 0, leaf, nil))
	size := len(msg.Data)

	n := b.N
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if _, err := s.Append(ctx, request("p1", fmt.Sprintf("src-%d", i))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	ledger := time.Since(start)
	b.StopTimer()

	mfs, _ := s.opts.Registerer.(interface {
		Gather() ([]*dto.MetricFamily, error)
	}).Gather()
	for _, mf := range mfs {
		if mf.GetName() == "alpd_ledger_append_batch_size" {
			h := mf.GetMetric()[0].GetHistogram()
			b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount()), "leaves/batch")
		}
	}
	raw := rawPublish(b, nc, n, size)
	b.ReportMetric(float64(n)/ledger.Seconds(), "entries/s")
	b.ReportMetric(float64(n)/raw.Seconds(), "raw-msgs/s")
	b.ReportMetric(raw.Seconds()/ledger.Seconds(), "ratio")
}

// rawPublish is the floor: n async publishes of size bytes to a plain
// stream, waiting for every ack.
func rawPublish(b *testing.B, nc *nats.Conn, n, size int) time.Duration {
	js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithDefaultTimeout(time.Minute))
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, size)
	start := time.Now()
	for range n {
		for {
			_, err := js.PublishAsync("raw.p1", data)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				b.Fatal(err)
			}
			select { // the server is behind (SyncAlways): wait for acks
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Second):
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("raw publishes not acknowledged")
	}
	return time.Since(start)
}
