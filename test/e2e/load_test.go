package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/config"
)

// TestGovernedSendLatency measures the governed send end to end against
// the real alpd binary (all-in-one, embedded NATS): one agent, a PAT, one
// keep-alive HTTP client, N serial NLIP sends each answered after policy's
// decision; and beside them, interleaved one for one in the same run, N
// requests of the same body to a bare loopback HTTP echo, the floor any
// HTTP service stands on. It logs p50, p90 and p99 of both and their
// ratios. It is a measurement, not a check: it asserts only that every
// send was decided, never a time, and runs only when ALPD_LOAD is set
// (make bench):
//
//	ALPD_LOAD=1 go test -run '^TestGovernedSendLatency$' -v ./test/e2e/
//
// ALPD_LOAD_N sets N (default 2000, after 200 warm-up rounds);
// ALPD_LOAD_SYNC_INTERVAL sets the embedded NATS's nats.sync_interval
// (default always).
func TestGovernedSendLatency(t *testing.T) {
	if os.Getenv("ALPD_LOAD") == "" {
		t.Skip("a measurement: set ALPD_LOAD=1 to run it (make bench)")
	}
	n := 2000
	if v := os.Getenv("ALPD_LOAD_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("ALPD_LOAD_N=%q: want a number of sends, at least 10", v)
		}
	}
	const warmup = 200
	sync := config.SyncAlways
	if v := os.Getenv("ALPD_LOAD_SYNC_INTERVAL"); v != "" {
		sync = v
	}
	b := binaries(t)
	addr := freeAddr(t)
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"broker": map[string]any{"name": pathBroker, "tenants": []map[string]string{{"domain": splitTenant}}},
		"nats":   map[string]any{"sync_interval": sync},
		// Rate limits out of reach, so the floor is the work, not the
		// buckets.
		"nlip": map[string]any{
			"agent_per_minute": 6_000_000, "agent_burst": 1_000_000,
			"person_per_minute": 6_000_000, "person_burst": 1_000_000,
			"tenant_per_minute": 60_000_000, "tenant_burst": 10_000_000,
		},
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": pathUser, "password": pathUser + "-pw"}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv(), "--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)
	pat, _ := signInAgent(t, addr, pathUser, "alp.send")

	body := []byte(fmt.Sprintf(`{"messagetype":"alp:%s","format":"text","subformat":"english","content":"hello",
	 "submessages":[{"label":"alp.to","format":"structured","subformat":"uri","content":"acct:%s"},
	 {"label":"alp.body","format":"structured","subformat":"json","content":%s}]}`, pathType, pathTo, pathBody))
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	defer echo.Close()

	// One client each, keep-alive: after the first request every round
	// reuses its connection.
	sendClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	echoClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
	post := func(c *http.Client, url, token string) (time.Duration, []byte) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %d %v %s", url, resp.StatusCode, err, out)
		}
		return d, out
	}
	var cpuStart time.Duration
	sends := make([]time.Duration, 0, n)
	echoes := make([]time.Duration, 0, n)
	for i := range warmup + n {
		ds, reply := post(sendClient, "http://"+addr+"/nlip/", pat)
		// 200 with alp.result is a decided send; pending is 202.
		if _, ok := submessage(reply, "alp.result"); !ok {
			t.Fatalf("send %d: no alp.result in %s", i, reply)
		}
		de, _ := post(echoClient, echo.URL+"/nlip/", "")
		if i == warmup-1 {
			cpuStart, _ = cpuTime(p.cmd.Process.Pid)
		}
		if i >= warmup {
			sends = append(sends, ds)
			echoes = append(echoes, de)
		}
	}
	cpuEnd, cpuErr := cpuTime(p.cmd.Process.Pid)
	slices.Sort(sends)
	slices.Sort(echoes)
	q := func(s []time.Duration, p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	us := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + "µs" }
	t.Logf("%d serial sends and %d echoes, interleaved, keep-alive, one client each; nats.sync_interval %s", n, n, sync)
	t.Logf("%-14s %10s %10s %10s", "", "p50", "p90", "p99")
	for _, row := range []struct {
		name string
		s    []time.Duration
	}{{"governed send", sends}, {"loopback echo", echoes}} {
		t.Logf("%-14s %10s %10s %10s", row.name, us(q(row.s, .5)), us(q(row.s, .9)), us(q(row.s, .99)))
	}
	ratio := func(p float64) string {
		return strconv.FormatFloat(float64(q(sends, p))/float64(q(echoes, p)), 'f', 1, 64) + "×"
	}
	t.Logf("%-14s %10s %10s %10s", "ratio", ratio(.5), ratio(.9), ratio(.99))
	if cpuErr == nil {
		// Every goroutine of alpd (its embedded NATS included), so what
		// the ledger does in the background counts too.
		t.Logf("alpd CPU per send: %s", us((cpuEnd-cpuStart)/time.Duration(n)))
	}
}

// cpuTime is the user and system CPU time process pid has used, from
// /proc/<pid>/stat (Linux; an error elsewhere).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// utime and stime are fields 14 and 15 of the file, in clock ticks
	// (USER_HZ, 100 on Linux).
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
