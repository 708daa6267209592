// Package e2e holds alpd's end-to-end tests. They build the real alpd and
// nats-server binaries once per run, start them as processes on loopback
// and talk to them only through their public interfaces: HTTP (/healthz,
// /readyz, /metrics), gRPC (health and Ping), signals and exit codes.
//
// The tests are skipped with -short. Run them with
//
//	GOTOOLCHAIN=local go test -race -count=1 ./test/e2e/
package e2e
