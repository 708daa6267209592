package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// floodRSSBound is the most alpd's resident memory may grow under the body
// floods of TestBodyFloodMemoryBound (documented in docs/operations.md,
// "Limits and timeouts"). Measured: under 3 MiB; before the route body
// limits, the same floods cost about 680 MiB.
const floodRSSBound = 32 << 20

// Flood sizes: issue 10, finding 2.
const (
	floodPosts   = 30      // parallel posts
	floodBody    = 9 << 20 // bytes each
	floodHeld    = 10      // bodies held open
	floodHeldLen = 4 << 20 // bytes sent of each held body before it stalls
)

// vmRSS reads the resident memory of pid from /proc.
func vmRSS(pid int) (int64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// TestBodyFloodMemoryBound (issue 10, finding 2): thirty parallel 9 MiB
// posts to a tenant's OAuth token endpoint (half announcing their length,
// half chunked) while ten more bodies are held open half-sent grow alpd's
// resident memory by less than floodRSSBound. The process's VmRSS is
// sampled throughout; the peak counts.
func TestBodyFloodMemoryBound(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the process's memory from /proc")
	}
	b := binaries(t)
	addr := freeAddr(t)
	configFile := filepath.Join(t.TempDir(), "alpd.yaml")
	writeYAML(t, configFile, map[string]any{
		"identity": map[string]any{"test_idp": map[string]any{
			"enabled": true,
			"users":   []map[string]any{{"username": "ana", "password": "ana-pw"}},
		}},
	})
	p := startProc(t, "alpd", b.alpd, hermeticEnv("ALPD_TENANTS=example.org"),
		"--config", configFile, "--data-dir", t.TempDir(), "--http-addr", addr)
	waitReady(t, p, addr)
	pid := p.cmd.Process.Pid
	token := "/oauth/example.org/token"

	// Warm up the endpoint so its first use is not counted as flood.
	for range 3 {
		resp, err := http.Post("http://"+addr+token, "application/x-www-form-urlencoded", strings.NewReader("grant_type=x"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	time.Sleep(200 * time.Millisecond)
	base, err := vmRSS(pid)
	if err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	peak := make(chan int64)
	go func() {
		top := base
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				peak <- top
				return
			case <-tick.C:
				if n, err := vmRSS(pid); err == nil {
					top = max(top, n)
				}
			}
		}
	}()

	header := func(chunked bool) string {
		h := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\n", token, addr)
		if chunked {
			return h + "Transfer-Encoding: chunked\r\n\r\n"
		}
		return h + fmt.Sprintf("Content-Length: %d\r\n\r\n", floodBody)
	}
	// send writes n body bytes of form data; the server may stop reading
	// and close at any point, which ends it.
	send := func(c net.Conn, chunked bool, n int) {
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		chunk[0] = 'x'
		chunk[1] = '='
		for sent := 0; sent < n; sent += len(chunk) {
			var err error
			if chunked {
				_, err = fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk)
			} else {
				_, err = c.Write(chunk)
			}
			if err != nil {
				return
			}
		}
	}

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[string]int{}
	answer := func(c net.Conn) {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			statuses["no answer"]++
			return
		}
		resp.Body.Close()
		statuses[resp.Status]++
	}
	for i := range floodHeld {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		chunked := i%2 == 1
		wg.Go(func() {
			fmt.Fprint(c, header(chunked))
			send(c, chunked, floodHeldLen)
			// ... and the client never finishes its body.
		})
	}
	for i := range floodPosts {
		chunked := i%2 == 1
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				mu.Lock()
				statuses["dial: "+err.Error()]++
				mu.Unlock()
				return
			}
			defer c.Close()
			done := make(chan struct{})
			go func() { answer(c); close(done) }()
			fmt.Fprint(c, header(chunked))
			send(c, chunked, floodBody)
			if chunked {
				fmt.Fprint(c, "0\r\n\r\n")
			}
			<-done
		})
	}
	wg.Wait()
	for _, c := range held {
		wg.Go(func() { answer(c) })
	}
	wg.Wait()
	close(stop)
	top := <-peak
	growth := top - base
	t.Logf("alpd RSS: %.1f MiB before, peak %.1f MiB during the floods (+%.1f MiB; bound %d MiB); answers %v",
		mib(base), mib(top), mib(growth), floodRSSBound>>20, statuses)
	if growth > floodRSSBound {
		t.Errorf("%d posts of %d MiB and %d held bodies grew alpd's RSS by %.1f MiB, over the %d MiB bound",
			floodPosts, floodBody>>20, floodHeld, mib(growth), floodRSSBound>>20)
	}
	if status, _, err := get("http://" + addr + "/healthz"); err != nil || status != http.StatusOK {
		t.Errorf("alpd after the floods: %d %v", status, err)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
