// Package ledger keeps one append-only, verifiable log per person: an RFC
// 6962 Merkle log (internal/ledgerlog) on the ledger stream, with signed
// checkpoints and receipts.
//
// The service is wired from these parts (Dendrite-style):
//
//   - consumers: the writer that turns each event of the partitioned work
//     queue (send requests, policy's decisions and deliverables, erasures,
//     agents' inbox acknowledgements; the queue and its partition
//     consumers are declared in internal/streams) into a leaf, and a
//     same-broker delivery into the recipient's receipt, recorded in both
//     people's logs;
//   - receipts: signing receipts and recording receipt entries, for the
//     writer and for IssueReceipt and RecordReceipt;
//   - federation.go: federation's gRPC methods for exchanges with other
//     brokers (the sender's commitment, the recipient's receipt, cosigning
//     as a witness and recording cosignatures);
//   - storage/jsstore: the logs themselves — fork-free appends, lazily
//     loaded trees, snapshots, checkpoints — behind the read interface
//     storage.Reader that the person-facing API (services/ledger/api)
//     builds on;
//   - secrets: the per-person ledger secrets that salt commitments and
//     seal their openings, erased with the person.
//
// docs/ledger.md, "The ledger service", is the operator's view.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	ledgerv1 "github.com/alpd-project/alpd/gen/alp/ledger/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/natsauth"
	"github.com/alpd-project/alpd/internal/service"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/services/ledger/consumers"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/services/ledger/secrets"
	"github.com/alpd-project/alpd/services/ledger/storage"
	"github.com/alpd-project/alpd/services/ledger/storage/jsstore"
)

// Options are the ledger's own settings; zero values take the defaults.
type Options struct {
	// Partitions of the work queue (default streams.LedgerPartitions, 8).
	// With per-role NATS users the permission table lists that many
	// consumers; more need internal/natsauth widened.
	Partitions int
	// Workers per partition in this process (default 2): concurrent
	// handlers whose appends to one log are grouped into one batch.
	Workers int
	// MaxAckPending per partition consumer (default 64).
	MaxAckPending int
	// MaxBatch bounds the leaves of one atomic append (default 500).
	MaxBatch int
	// MaxTrees bounds the persons' trees held in memory (default 4096).
	MaxTrees int
	// CheckpointInterval: longest delay between an append and its signed
	// checkpoint (default 100ms); CheckpointEvery: appends that start a
	// checkpoint round early (default 1000).
	CheckpointInterval time.Duration
	CheckpointEvery    int
	// SecretsCacheTTL bounds how late a replica sees another's erasure
	// (default 30s).
	SecretsCacheTTL time.Duration
	// Registerer gets the ledger's metrics (the broker passes its own,
	// labelled broker=<name>); default a private registry.
	Registerer prometheus.Registerer
	// API, if set, serves the person-facing read API (HTTPRoutes and the
	// gRPC read methods) from Start; without it they refuse as unavailable.
	API *APIOptions
	// AfterPublish is a test hook (jsstore.Options.AfterPublish).
	AfterPublish func(tenant, person string, first uint64, n int) error
}

func (o *Options) complete() {
	if o.Partitions <= 0 {
		o.Partitions = streams.LedgerPartitions
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = 64
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
}

// Service is the ledger service.
type Service struct {
	service.Base
	ledgerv1.UnimplementedLedgerServiceServer
	opts    Options
	store   *jsstore.Store
	secrets *secrets.Store
	writer  *consumers.Writer
	// receipts signs and records receipts (IssueReceipt, RecordReceipt,
	// and the writer's for same-broker deliveries).
	receipts *receipts.Issuer
	initErr  error
	reads    apiState // the person-facing read API (api_wiring.go)
}

// New builds the ledger service. It does no I/O; Start does.
func New(d service.Deps, o Options) *Service {
	o.complete()
	s := &Service{Base: service.NewBase(alpv1.Role_ROLE_LEDGER, d), opts: o}
	s.writer = &consumers.Writer{Sealer: d.Sealer, Tenants: d.Tenants, Logger: s.Logger}
	s.initErr = s.writer.Register(o.Registerer)
	return s
}

// Start creates the ledger's streams and buckets, starts the checkpoint
// rounds and the partition consumers. It reads no log: trees load on
// first use.
func (s *Service) Start(ctx context.Context) error {
	if s.initErr != nil {
		return s.initErr
	}
	if s.Sealer == nil {
		return errors.New("ledger: no data-key sealer (the ledger opens bodies to commit to them)")
	}
	if s.opts.API != nil {
		s.serveAPI(ctx, *s.opts.API)
	}
	js := s.Bus.JetStream()
	cfg := secrets.BucketConfig(s.Bus.StreamName(natsauth.LedgerSecretsBucket))
	cfg.Replicas = s.Bus.Options().Replicas
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ledger: secrets bucket: %w", err)
	}
	s.secrets = secrets.New(kv, s.Keys, secrets.Options{CacheTTL: s.opts.SecretsCacheTTL})
	s.store, err = jsstore.New(s.Bus, s.Keys, s.secrets, jsstore.Options{
		Tenants: s.Tenants, MaxBatch: s.opts.MaxBatch, MaxTrees: s.opts.MaxTrees,
		CheckpointInterval: s.opts.CheckpointInterval, CheckpointEvery: s.opts.CheckpointEvery,
		AfterPublish: s.opts.AfterPublish, Logger: s.Logger, Registerer: s.opts.Registerer,
	})
	if err != nil {
		return err
	}
	s.receipts = &receipts.Issuer{Store: s.store, Keys: s.Keys}
	s.writer.Store, s.writer.Secrets, s.writer.Receipts = s.store, s.secrets, s.receipts
	if err := s.ensureWork(ctx); err != nil {
		return err
	}
	go s.store.Run(ctx)
	for _, c := range streams.OwnedConsumers(s.Role(), s.opts.Partitions) {
		spec := c.Spec()
		spec.Workers = s.opts.Workers
		spec.MaxAckPending = s.opts.MaxAckPending
		spec.EnsureStream = s.ensureWork
		if err := s.Consume(ctx, spec, s.writer.Handle); err != nil {
			return err
		}
	}
	s.MarkStarted()
	return nil
}

// ensureWork creates or updates the partitioned work queue, and brings the
// ledger stream and buckets back if they vanished (a consumer's supervisor
// calls it before recreating its consumer).
func (s *Service) ensureWork(ctx context.Context) error {
	if err := s.store.Ensure(ctx, s.Limits); err != nil {
		return err
	}
	work, _ := streams.ByName(streams.LedgerWork)
	_, err := s.Bus.EnsureStream(ctx, work.WithPartitions(s.opts.Partitions).Spec(s.Tenants, s.Limits))
	return err
}

// Storage is the read side of the persons' logs, for the person-facing
// API; nil before Start.
func (s *Service) Storage() storage.Reader {
	if s.store == nil {
		return nil
	}
	return s.store
}

// Stopped is closed when the consumers have drained and the last
// checkpoint round is done.
func (s *Service) Stopped() <-chan struct{} {
	done := make(chan struct{})
	consumers := s.Base.Stopped()
	go func() {
		<-consumers
		if s.store != nil {
			<-s.store.Done()
		}
		close(done)
	}()
	return done
}

// Store is the JetStream store (tests, receipts).
func (s *Service) Store() *jsstore.Store { return s.store }

// Secrets is the ledger-secret store (tests).
func (s *Service) Secrets() *secrets.Store { return s.secrets }

// RegisterGRPC registers the ledger gRPC API.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) { ledgerv1.RegisterLedgerServiceServer(r, s) }

// Ping implements LedgerService.Ping.
func (s *Service) Ping(_ context.Context, req *ledgerv1.PingRequest) (*ledgerv1.PingResponse, error) {
	env, ready := s.Pass(req.GetEnvelope(), "ping")
	return &ledgerv1.PingResponse{Envelope: env, Service: s.Name(), Ready: ready}, nil
}
