package nlipapi_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/services/ingress"
	"github.com/alpd-project/alpd/services/ingress/nlipapi"
)

// Finding 4's flood: 200 sockets (8 persons with 25 each), each holding a
// message of 900 KiB begun and never finished, under the default limits
// (1 MiB messages, 16 MiB read budget).
const (
	floodPersons   = 8
	floodPerPerson = 25
	floodPartial   = 900 << 10
	// floodRSSBound is the documented bound (docs/operations.md, "Limits
	// and timeouts") on what the flood may add to the process's resident
	// memory: the read budget, as much again for the collector's slack,
	// the connections themselves (both ends are in this process: ~57 KiB
	// per pair, 11 MiB for 200) and room to spare. Measured: +30 MiB.
	// Buffering every partial message, as before, added 239 MiB.
	floodRSSBound = 64 << 20
)

// TestWebSocketFloodMemoryBounded: 200 sockets each sending most of a
// large message used to cost ~1.1 MiB each (issue 10, finding 4); now all
// of them together hold at most the read budget, and the rest is dropped as
// it arrives. Measured from the process's RSS.
func TestWebSocketFloodMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~180 MB over loopback")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc/self/status for the resident set size")
	}
	// The socket caps and the agents' rates (a handshake and a message
	// per socket) must let the flood in (8 × 25 = 200), and no timer may
	// end it while it is measured.
	flood := ingress.Rate{Limit: 100, Burst: 2 * floodPerPerson}
	r := newRig(t, rigOptions{door: ingress.DoorConfig{PerAgent: flood, PerPerson: flood}})
	api, srv := r.ownAPI(t, nlipapi.Config{WSMaxPerAgent: floodPerPerson, WSMaxPerPerson: floodPerPerson,
		WSReadTimeout: 5 * time.Minute, WSIdleTimeout: 5 * time.Minute})
	var tokens []string
	for i := range floodPersons {
		a := r.br.Agent(t, tenant, fmt.Sprintf("sub-flood-%d", i), fmt.Sprintf("flood%d@example.org", i), fmt.Sprintf("agent-flood-%d", i), "alp.send")
		tokens = append(tokens, a.Token)
	}
	payload := bytes.Repeat([]byte(" "), floodPartial)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	runtime.GC()
	debug.FreeOSMemory()
	before := residentBytes(t)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := int64(ms.HeapInuse)
	n := floodPersons * floodPerPerson
	done := make(chan error, n)
	for i := range n {
		c, _, err := dialURL(t, srv.URL, "/nlip/ws/text", tokens[i%floodPersons], "")
		if err != nil {
			t.Fatalf("socket %d: %v", i, err)
		}
		go func() {
			// Read the broker's answers (server_busy) and pongs.
			for {
				if _, _, err := c.Read(ctx); err != nil {
					return
				}
			}
		}()
		go func() {
			w, err := c.Writer(ctx, websocket.MessageText)
			if err == nil {
				_, err = w.Write(payload) // and never Close: the message stays unfinished
			}
			if err == nil {
				// A ping may come between the frames of a message. Its
				// frame flushes the tail of ours, and its pong says the
				// broker has read all of ours.
				err = c.Ping(ctx)
			}
			done <- err
		}()
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	after := residentBytes(t)
	runtime.ReadMemStats(&ms)
	heapGrowth := int64(ms.HeapInuse) - heapBefore
	s := api.WebSocketStats()
	growth := after - before
	t.Logf("%d sockets × %d KiB unfinished: RSS %.1f → %.1f MiB (+%.1f MiB, bound %d MiB); heap in use +%.1f MiB; buffered %.1f MiB of the %d MiB budget",
		s.Open, floodPartial>>10, mib(before), mib(after), mib(growth), floodRSSBound>>20, mib(heapGrowth), mib(s.BufferedBytes), nlipapi.DefaultConfig().WSReadBuffer>>20)
	if s.Open != n || s.ReceivedBytes < int64(n)*floodPartial {
		t.Errorf("%d sockets open, %d bytes read: want %d and %d", s.Open, s.ReceivedBytes, n, n*floodPartial)
	}
	if s.BufferedBytes > nlipapi.DefaultConfig().WSReadBuffer {
		t.Errorf("%d bytes buffered, over the budget", s.BufferedBytes)
	}
	if heapGrowth > floodRSSBound {
		t.Errorf("the flood added %.1f MiB to the heap, over the bound of %d MiB", mib(heapGrowth), floodRSSBound>>20)
	}
	// The race detector keeps shadow memory for every byte and goroutine,
	// several times what the program uses: there only the heap is checked.
	if growth > floodRSSBound && !raceDetector {
		t.Errorf("the flood added %.1f MiB of resident memory, over the bound of %d MiB", mib(growth), floodRSSBound>>20)
	}
}

// residentBytes is the process's resident set size (VmRSS).
func residentBytes(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
