// Package natstest starts real nats-server instances for tests, the way
// nats-server's own tests do: JetStream on, a random loopback port and a
// temporary store directory, shut down when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Options returns server options for a JetStream server on a random loopback
// port storing under dir.
func Options(dir string) *server.Options {
	return &server.Options{
		ServerName: "natstest",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	}
}

// RunServer starts a server with opts and stops it when the test ends.
func RunServer(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatalf("natstest: server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// RunJetStream starts a JetStream server on a random port with a temp store.
func RunJetStream(t testing.TB) *server.Server {
	t.Helper()
	return RunServer(t, Options(t.TempDir()))
}

// Connect connects to s and closes the connection when the test ends.
func Connect(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("natstest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
