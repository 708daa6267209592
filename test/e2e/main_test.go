package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// Timeouts of the process life cycle.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = alpdtest.StopTimeout
)

func TestMain(m *testing.M) { os.Exit(alpdtest.Main(m)) }

// bins are the paths of the binaries built for the run.
type bins struct {
	alpd, alpctl, natsServer string
}

// binaries builds alpd, alpctl and nats-server once per package run
// (alpdtest.Binaries) and returns their paths. It skips the test in -short
// mode.
func binaries(t *testing.T) bins {
	t.Helper()
	b := alpdtest.Binaries(t)
	return bins{alpd: b.ALPD, alpctl: b.ALPCTL, natsServer: b.NATSServer}
}

// freeAddrs returns n distinct loopback host:port addresses that were free a
// moment ago. All listeners are held until every port is picked, so the n
// ports differ from each other.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	var lis []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("pick a free port: %v", err)
		}
		lis = append(lis, l)
		addrs = append(addrs, l.Addr().String())
	}
	for _, l := range lis {
		_ = l.Close()
	}
	return addrs
}

func freeAddr(t *testing.T) string { return freeAddrs(t, 1)[0] }

// proc is a started child process with its output captured
// (alpdtest.Proc, under the names these tests have always used).
type proc struct {
	*alpdtest.Proc
	name   string
	cmd    *exec.Cmd
	output *testkit.LockedBuffer // stdout and stderr
}

// hermeticEnv is the test's environment without any ALPD_* or ALPCTL_*
// variable, plus extra ("KEY=value").
func hermeticEnv(extra ...string) []string { return alpdtest.HermeticEnv(extra...) }

// startProc starts bin with args and env. The process is always killed in
// t.Cleanup if it is still running, and its output is logged when the test
// failed.
func startProc(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := alpdtest.Start(t, name, bin, env, args...)
	return &proc{Proc: p, name: p.Name, cmd: p.Cmd, output: p.Output}
}

func (p *proc) exited() bool { return p.Exited() }

// exitCode waits up to timeout for the process to end and returns its exit
// code; ok is false if it is still running.
func (p *proc) exitCode(timeout time.Duration) (code int, ok bool) { return p.ExitCode(timeout) }

// stop sends SIGTERM and requires exit code 0 within stopTimeout. It
// returns how long the process took to stop.
func (p *proc) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	p.Stop(t)
	return time.Since(start)
}

// logMessages returns the "msg" of every JSON log line of the process.
func (p *proc) logMessages() []string {
	var msgs []string
	for line := range strings.SplitSeq(p.output.String(), "\n") {
		var rec struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
			msgs = append(msgs, rec.Msg)
		}
	}
	return msgs
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// get fetches url and returns the status and body.
func get(url string) (int, []byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// waitReady polls http://addr/readyz until it answers 200, failing the test
// if the process exits first or readyTimeout passes. It returns how long it
// took.
func waitReady(t *testing.T, p *proc, addr string) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(readyTimeout)
	var last string
	for {
		if p.exited() {
			t.Fatalf("%s exited with code %d before it was ready (last /readyz: %s)", p.name, p.cmd.ProcessState.ExitCode(), last)
		}
		status, body, err := get("http://" + addr + "/readyz")
		switch {
		case err != nil:
			last = err.Error()
		case status == http.StatusOK:
			return time.Since(start)
		default:
			last = fmt.Sprintf("%d %s", status, bytes.TrimSpace(body))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %s (last /readyz: %s)", p.name, readyTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitTCP waits until addr accepts TCP connections.
func waitTCP(t *testing.T, p *proc, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if p.exited() {
			t.Fatalf("%s exited with code %d before accepting connections on %s", p.name, p.cmd.ProcessState.ExitCode(), addr)
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not accept connections on %s after %s: %v", p.name, addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readiness fetches /readyz?verbose=1 with an operator token and decodes
// it.
func readiness(t *testing.T, addr, operatorToken string) (int, readyz) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/readyz?verbose=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET /readyz?verbose=1: %v", err)
	}
	defer resp.Body.Close()
	status := resp.StatusCode
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /readyz?verbose=1: %v", err)
	}
	var r readyz
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("GET /readyz?verbose=1: %v in %s", err, body)
	}
	return status, r
}

// readyz is the JSON of /readyz?verbose=1 as a client sees it (decoded on
// its own rather than with broker.Readiness, so a renamed field fails here).
type readyz struct {
	Ready    bool   `json:"ready"`
	Error    string `json:"error"`
	Broker   string `json:"broker"`
	Services []struct {
		Name  string  `json:"name"`
		Ready bool    `json:"ready"`
		Error string  `json:"error"`
		Lag   *uint64 `json:"lag"`
		GRPC  string  `json:"grpc"`
	} `json:"services"`
	Streams []struct {
		Name       string   `json:"name"`
		Owner      string   `json:"owner"`
		Retention  string   `json:"retention"`
		MaxAge     string   `json:"max_age"`
		Subjects   []string `json:"subjects"`
		AppendOnly bool     `json:"append_only"`
	} `json:"streams"`
}

// toolTimeout bounds one run of a command-line tool (alpctl).
const toolTimeout = 30 * time.Second

// toolResult is the outcome of a command that ran to its end.
type toolResult struct {
	stdout, stderr string
	code           int
}

// runTool runs bin with args and env to its end (at most toolTimeout) and
// returns its output and exit code; it fails the test only if the command
// could not be run at all. The output is logged when the test fails.
func runTool(t *testing.T, bin string, env []string, args ...string) toolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) || ctx.Err() != nil {
		t.Fatalf("run %s %s: %v (context: %v)\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, ctx.Err(), &stdout, &stderr)
	}
	res := toolResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	line := filepath.Base(bin) + " " + strings.Join(args, " ")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- %s: exit code %d ----\nstdout:\n%sstderr:\n%s---- end ----", line, res.code, res.stdout, res.stderr)
		}
	})
	return res
}
