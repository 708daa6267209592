package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configure the in-process nats-server alpd starts when no
// NATS URL is configured.
type EmbeddedOptions struct {
	// StoreDir holds the JetStream store.
	StoreDir string
	// Listen is an optional host:port for clients outside the process; by
	// default the server listens on no port at all.
	Listen string
	// ServerName defaults to "alpd-embedded".
	ServerName string
	// SyncInterval 0 fsyncs every write before the server acknowledges
	// it; otherwise writes reach the operating system before their
	// acknowledgement and are fsynced together this often.
	SyncInterval time.Duration
	Logger       *slog.Logger
}

// Embedded is a running in-process nats-server.
type Embedded struct {
	Server *server.Server
}

// StartEmbedded starts nats-server in this process with JetStream on.
func StartEmbedded(o EmbeddedOptions) (*Embedded, error) {
	if o.StoreDir == "" {
		return nil, errors.New("bus: embedded NATS needs a store directory")
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		DontListen: o.Listen == "",
		NoSigs:     true,
		NoLog:      o.Logger == nil,
		// One node, no replicas to fall back on: by default every write
		// is on disk before it is acknowledged, so an acknowledged event
		// survives a crash of the machine too.
		SyncAlways:   o.SyncInterval == 0,
		SyncInterval: o.SyncInterval,
	}
	if opts.ServerName == "" {
		opts.ServerName = "alpd-embedded"
	}
	if o.Listen != "" {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("bus: embedded listen %q: %w", o.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("bus: embedded listen port %q: %w", port, err)
		}
		opts.Host, opts.Port = host, p
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded NATS: %w", err)
	}
	if o.Logger != nil {
		s.SetLoggerV2(&natsLogger{o.Logger.With("component", "nats-server")}, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, errors.New("bus: embedded NATS did not become ready in 30s")
	}
	return &Embedded{Server: s}, nil
}

// Connect opens an in-process client connection (no socket).
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(e.Server), nats.Name("alpd")}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to embedded NATS: %w", err)
	}
	return nc, nil
}

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
}

// Connect dials an external NATS (one URL or a cluster's list) and keeps
// reconnecting forever: supervised consumers resume when it is back.
func Connect(urls []string, name string, opts ...nats.Option) (*nats.Conn, error) {
	if len(urls) == 0 {
		return nil, errors.New("bus: no NATS URL")
	}
	opts = append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}, opts...)
	url := urls[0]
	for _, u := range urls[1:] {
		url += "," + u
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to NATS %s: %w", url, err)
	}
	return nc, nil
}

// natsLogger adapts nats-server's logger to slog.
type natsLogger struct{ l *slog.Logger }

func (n *natsLogger) Noticef(format string, v ...any) { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Warnf(format string, v ...any)   { n.l.Warn(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Fatalf(format string, v ...any)  { n.l.Error(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Errorf(format string, v ...any)  { n.l.Error(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Debugf(format string, v ...any)  { n.l.Debug(fmt.Sprintf(format, v...)) }
func (n *natsLogger) Tracef(format string, v ...any)  { n.l.Debug(fmt.Sprintf(format, v...)) }
