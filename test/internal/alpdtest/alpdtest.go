// Package alpdtest is what alpd's black-box test suites share (test/e2e,
// test/federation): building the real binaries once per run, running them
// as child processes, and doing what a person and their agents do through
// the broker's public doors (sign in at the test IdP, mint a PAT, get a
// company agent's token). It talks to brokers only over HTTP(S): a Session
// carries the base URL and the *http.Client to reach it, so the same code
// drives a plain-http broker on 127.0.0.1 and an HTTPS broker reached by its
// DNS name through a test CA and a dial mapping.
package alpdtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testkit"
)

// Timeouts of the process life cycle.
const (
	BuildTimeout = 5 * time.Minute
	StopTimeout  = 20 * time.Second
)

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

// Main runs a test package's tests (call it from TestMain: os.Exit(Main(m)))
// with a temporary directory for the binaries, removed afterwards.
func Main(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "alpd-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "alpdtest:", err)
		return 1
	}
	binDir = dir
	defer os.RemoveAll(dir)
	return m.Run()
}

// Bins are the paths of the binaries built for the run.
type Bins struct {
	ALPD, ALPCTL, NATSServer string
}

// Binaries builds alpd, alpctl and nats-server once per package run (the
// package's TestMain must call [Main]) and returns their paths. It skips
// the test in -short mode.
func Binaries(t testing.TB) Bins {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode (builds alpd, alpctl and nats-server and runs them as processes)")
	}
	if binDir == "" {
		t.Fatal("alpdtest: TestMain must call alpdtest.Main")
	}
	b := Bins{
		ALPD:       filepath.Join(binDir, "alpd"),
		ALPCTL:     filepath.Join(binDir, "alpctl"),
		NATSServer: filepath.Join(binDir, "nats-server"),
	}
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("go tool not found in PATH: %w", err)
			return
		}
		start := time.Now()
		for _, x := range []struct{ out, pkg string }{
			{b.ALPD, "github.com/alpd-project/alpd/cmd/alpd"},
			{b.ALPCTL, "github.com/alpd-project/alpd/cmd/alpctl"},
			{b.NATSServer, "github.com/nats-io/nats-server/v2"},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
			cmd := exec.CommandContext(ctx, goTool, "build", "-o", x.out, x.pkg)
			cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", x.pkg, err, out)
				return
			}
		}
		fmt.Fprintf(os.Stderr, "alpdtest: built alpd, alpctl and nats-server in %s\n", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return b
}

// HermeticEnv is the test's environment without any ALPD_* or ALPCTL_*
// variable, plus extra ("KEY=value").
func HermeticEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ALPD_") && !strings.HasPrefix(kv, "ALPCTL_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Proc is a started child process with its output (stdout and stderr)
// captured.
type Proc struct {
	Name   string
	Cmd    *exec.Cmd
	Output *testkit.LockedBuffer
	done   chan struct{}
}

// Start starts bin with args and env. The process is killed in t.Cleanup
// if it is still running, and its output is logged when the test failed.
func Start(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), Output: &testkit.LockedBuffer{}, done: make(chan struct{})}
	p.Cmd.Env = env
	p.Cmd.Stdout = p.Output
	p.Cmd.Stderr = p.Output
	p.Cmd.WaitDelay = 5 * time.Second
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("---- output of %s (%s) ----\n%s---- end of %s ----", name, strings.Join(p.Cmd.Args, " "), p.Output.String(), name)
		}
	})
	return p
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitCode waits up to timeout for the process to end and returns its exit
// code; ok is false if it is still running.
func (p *Proc) ExitCode(timeout time.Duration) (code int, ok bool) {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), true
	case <-time.After(timeout):
		return 0, false
	}
}

// Stop sends SIGTERM and requires exit code 0 within StopTimeout.
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.Exited() {
		t.Errorf("%s: SIGTERM: %v", p.Name, err)
	}
	code, ok := p.ExitCode(StopTimeout)
	switch {
	case !ok:
		t.Errorf("%s: still running %s after SIGTERM", p.Name, StopTimeout)
	case code != 0:
		t.Errorf("%s: exit code %d after SIGTERM, want 0 (%s)", p.Name, code, p.Cmd.ProcessState)
	}
}

// Kill ends the process with SIGKILL: no shutdown, no flush.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill -9 %s: %v", p.Name, err)
	}
	if _, ok := p.ExitCode(10 * time.Second); !ok {
		t.Fatalf("%s still running 10s after SIGKILL", p.Name)
	}
}
