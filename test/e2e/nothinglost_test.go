package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alpd-project/alpd/internal/bus"
	"github.com/alpd-project/alpd/internal/streams"
	"github.com/alpd-project/alpd/internal/testkit"
)

// What TestDeliveryNothingLost sends, and when it kills alpd.
const (
	lostItems   = 1000
	lostSenders = 8
	lostKillAt  = 400 // sends answered when alpd is killed
)

// tally is what one agent got: how often each item reached it, which it
// knows it acknowledged (the broker said so), and any item that reached it
// again after that.
type tally struct {
	name  string
	mu    sync.Mutex
	seen  map[string]int
	acked map[string]bool
	late  []string
	// errs are answers the agent did not expect (not a dropped
	// connection, which it retries).
	errs []string
}

func newTally(name string) *tally {
	return &tally{name: name, seen: map[string]int{}, acked: map[string]bool{}}
}

func (a *tally) got(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[id]++
	if a.acked[id] {
		a.late = append(a.late, id)
	}
}

func (a *tally) ack(ids []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		a.acked[id] = true
	}
}

func (a *tally) unexpected(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.errs) < 10 {
		a.errs = append(a.errs, fmt.Sprintf(format, args...))
	}
}

// unseen counts the ids that have not reached the agent yet.
func (a *tally) unseen(ids []string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, id := range ids {
		if a.seen[id] == 0 {
			n++
		}
	}
	return n
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// watchAndAck is an agent on the NLIP WebSocket: it takes the pushed
// items and acknowledges them on the same connection in batches; when the
// connection ends it connects again, until ctx ends.
func watchAndAck(ctx context.Context, addr, token string, a *tally) {
	for ctx.Err() == nil {
		w, err := dialInbox(ctx, addr, token)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		var pending []string
		flush := func() bool {
			if len(pending) == 0 {
				return true
			}
			if err := w.ack(ctx, pending...); err != nil {
				return false
			}
			a.ack(pending)
			pending = nil
			return true
		}
	read:
		for {
			select {
			case it := <-w.items:
				a.got(it.ID)
				if pending = append(pending, it.ID); len(pending) >= 50 && !flush() {
					break read
				}
			case <-time.After(50 * time.Millisecond):
				if !flush() {
					break read
				}
			case <-w.done:
				break read
			case <-ctx.Done():
				break read
			}
		}
		w.c.CloseNow()
		<-w.done
		// What arrived before the connection ended was delivered too.
		for len(w.items) > 0 {
			a.got((<-w.items).ID)
		}
	}
}

// pollAndAck is an agent that polls: list lists its unacknowledged items
// (ids), ack acknowledges them; a failed request is tried again.
func pollAndAck(ctx context.Context, a *tally, list func(context.Context) ([]string, error), ack func(context.Context, []string) error) {
	for ctx.Err() == nil {
		ids, err := list(ctx)
		if err != nil || len(ids) == 0 {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		for _, id := range ids {
			a.got(id)
		}
		if err := ack(ctx, ids); err == nil {
			a.ack(ids)
		}
		// The REST door allows an agent 20 requests a second.
		pause(ctx, 60*time.Millisecond)
	}
}

// errTryAgain is an answer to retry (the broker restarting, a rate).
var errTryAgain = errors.New("try again")

// answerErr sorts an answer: nil for want, errTryAgain for what a client
// retries (429, 503), else an error for the tally.
func answerErr(status, want int, raw []byte) error {
	switch {
	case status == want:
		return nil
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == 0:
		return errTryAgain
	default:
		return fmt.Errorf("answered %d %.300s", status, raw)
	}
}

func restAgent(addr, token string, a *tally) (list func(context.Context) ([]string, error), ack func(context.Context, []string) error) {
	list = func(ctx context.Context) ([]string, error) {
		status, raw, err := tryBearer(ctx, http.MethodGet, addr, "/v1/agent/inbox?limit=100", token, nil)
		if err != nil {
			return nil, err
		}
		if err := answerErr(status, http.StatusOK, raw); err != nil {
			if err != errTryAgain {
				a.unexpected("REST list: %v", err)
			}
			return nil, err
		}
		var page restPage
		if err := json.Unmarshal(raw, &page); err != nil {
			a.unexpected("REST list: %v", err)
			return nil, err
		}
		var ids []string
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		return ids, nil
	}
	ack = func(ctx context.Context, ids []string) error {
		status, raw, err := tryBearer(ctx, http.MethodPost, addr, "/v1/agent/inbox/ack", token, map[string]any{"ids": ids})
		if err != nil {
			return err
		}
		if err := answerErr(status, http.StatusOK, raw); err != nil {
			if err != errTryAgain {
				a.unexpected("REST ack: %v", err)
			}
			return err
		}
		return nil
	}
	return list, ack
}

func nlipAgent(addr, token string, a *tally) (list func(context.Context) ([]string, error), ack func(context.Context, []string) error) {
	list = func(ctx context.Context) ([]string, error) {
		status, raw, err := tryBearer(ctx, http.MethodGet, addr, "/nlip/inbox?limit=100", token, nil)
		if err != nil {
			return nil, err
		}
		if err := answerErr(status, http.StatusOK, raw); err != nil {
			if err != errTryAgain {
				a.unexpected("NLIP list: %v", err)
			}
			return nil, err
		}
		var items []struct {
			ID string `json:"id"`
		}
		if c, ok := submessage(raw, "alp.items"); !ok || json.Unmarshal(c, &items) != nil {
			a.unexpected("NLIP list: no alp.items in %.300s", raw)
			return nil, errTryAgain
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		return ids, nil
	}
	ack = func(ctx context.Context, ids []string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/nlip/", bytes.NewReader(nlipAck(ids...)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := answerErr(resp.StatusCode, http.StatusOK, raw); err != nil {
			if err != errTryAgain {
				a.unexpected("NLIP ack: %v", err)
			}
			return err
		}
		if _, ok := submessage(raw, "alp.acked"); !ok {
			a.unexpected("NLIP ack: no alp.acked in %.300s", raw)
			return errTryAgain
		}
		return nil
	}
	return list, ack
}

// sendKeyed sends one meeting request to lee over NLIP with an
// idempotency key: the envelope id, whether the broker called it a
// duplicate, and errTryAgain (or a connection error) when it should be
// sent again.
func sendKeyed(ctx context.Context, addr, token, key string, n int) (id string, duplicate bool, err error) {
	body := fmt.Sprintf(`{"subject":"item %d","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@example.org"]}`, n)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/nlip/", bytes.NewReader(nlipSend("lee@"+splitTenant, "meeting.request/v1", body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", false, err
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// 200 decided, 202 pending: the envelope is stored either way.
	if resp.StatusCode != http.StatusAccepted {
		if err := answerErr(resp.StatusCode, http.StatusOK, raw); err != nil {
			return "", false, err
		}
	}
	var r struct {
		EnvelopeID string `json:"envelope_id"`
		Outcome    string `json:"outcome"`
		Duplicate  bool   `json:"duplicate"`
	}
	if c, ok := submessage(raw, "alp.result"); !ok || json.Unmarshal(c, &r) != nil || r.EnvelopeID == "" {
		return "", false, fmt.Errorf("no alp.result in %.300s", raw)
	}
	if r.Outcome == "refuse" || r.Outcome == "hold" {
		return "", false, fmt.Errorf("outcome %s: %.300s", r.Outcome, raw)
	}
	return r.EnvelopeID, r.Duplicate, nil
}

// inboxSubjects counts the messages on each subject of lee's inbox.
func inboxSubjects(t *testing.T, js jetstream.JetStream, personID string) map[string]uint64 {
	t.Helper()
	filter, err := streams.InboxPersonFilter(splitTenant, personID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, bus.StreamName(pathBroker, streams.Inbox))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// TestDeliveryNothingLost: 1,000 messages from ana to lee while three of
// lee's agents take them — dot on the NLIP WebSocket (pushed, a company
// agent), Muse polling REST and a third agent polling NLIP's GET
// /nlip/inbox (personal access tokens), each acknowledging what it got in
// batches — and alpd is killed with SIGKILL in the middle, then started
// again on the same data directory. Senders retry what was not answered
// with the same idempotency key, agents reconnect. Every agent ends with
// every item acknowledged; an item may come again only until its agent's
// acknowledgement was answered, never after, and always with its id; the
// inbox stream holds each item once and each agent's acknowledgement
// once; a send repeated after the restart is the same envelope.
func TestDeliveryNothingLost(t *testing.T) {
	start := time.Now()
	d := startDeliveryBroker(t, unlimitedNLIP)
	addr, lee := d.addr, d.lee
	dot := companyAgent(t, d.ana, lee, "dot", "alp.read")
	muse := lee.patNamed(t, "muse", "alp.read")
	poller := lee.patNamed(t, "poller", "alp.read")
	// The connection reaches policy a moment after lee accepted.
	first := d.waitDelivered(t, d.anaPAT, "meeting.request/v1", `{"subject":"first","start":"2026-12-03T10:00:00Z","duration":"PT30M","attendees":["lee@example.org"]}`)

	agents := []*tally{newTally("dot (NLIP WebSocket)"), newTally("muse (REST)"), newTally("poller (NLIP GET)")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var readers sync.WaitGroup
	readers.Go(func() { watchAndAck(ctx, addr, dot, agents[0]) })
	readers.Go(func() { l, a := restAgent(addr, muse, agents[1]); pollAndAck(ctx, agents[1], l, a) })
	readers.Go(func() { l, a := nlipAgent(addr, poller, agents[2]); pollAndAck(ctx, agents[2], l, a) })

	// The senders: lostSenders at once, each retrying until its message
	// is answered.
	var (
		mu      sync.Mutex
		ids     = make([]string, lostItems)
		sendErr []string
	)
	var answered atomic.Int64
	jobs := make(chan int, lostItems)
	for n := range lostItems {
		jobs <- n
	}
	close(jobs)
	var senders sync.WaitGroup
	for range lostSenders {
		senders.Go(func() {
			for n := range jobs {
				for ctx.Err() == nil {
					id, _, err := sendKeyed(ctx, addr, d.anaPAT, fmt.Sprintf("lost-%d", n), n)
					if err == nil {
						mu.Lock()
						ids[n] = id
						mu.Unlock()
						answered.Add(1)
						break
					}
					var netErr interface{ Timeout() bool }
					if err != errTryAgain && !errors.As(err, &netErr) && !strings.Contains(err.Error(), "connection") && !strings.Contains(err.Error(), "EOF") {
						mu.Lock()
						sendErr = append(sendErr, fmt.Sprintf("send %d: %v", n, err))
						mu.Unlock()
						break
					}
					pause(ctx, 50*time.Millisecond)
				}
			}
		})
	}

	// Kill alpd while items are being sent and delivered.
	testkit.Eventually(t, 60*time.Second, func() error {
		if n := answered.Load(); n < lostKillAt {
			return fmt.Errorf("%d sends answered", n)
		}
		return nil
	}, "the first sends")
	killedAfter := answered.Load()
	d.kill(t)
	killed := time.Now()
	d.start(t)
	restarted := time.Since(killed)

	senders.Wait()
	sendsDone := time.Since(start)
	if len(sendErr) > 0 {
		t.Fatalf("sends failed: %v", sendErr)
	}
	all := append([]string{first}, ids...)
	if slices.Contains(ids, "") {
		t.Fatal("a send has no envelope id")
	}
	// A send made again, however late, is the same envelope.
	for _, n := range []int{0, 1, lostKillAt / 2, lostItems - 1} {
		id, dup, err := sendKeyed(context.Background(), addr, d.anaPAT, fmt.Sprintf("lost-%d", n), n)
		if err != nil || id != ids[n] || !dup {
			t.Errorf("send %d again: %s duplicate %v %v; want %s, a duplicate", n, id, dup, err, ids[n])
		}
	}

	// Done when every agent has had every item and the broker holds none
	// unacknowledged for it. The messages alpd was handling when it was
	// killed are delivered to its consumers again once bus.ack_wait (30s)
	// has passed: that is most of this wait. (An acknowledgement whose answer was lost in
	// the kill may have been recorded: the item is then not offered again,
	// and the broker's list of acknowledged items below says so.)
	paths := []string{"/nlip/inbox?limit=1", "/v1/agent/inbox?limit=1", "/nlip/inbox?limit=1"}
	tokens := []string{dot, muse, poller}
	for deadline := time.Now().Add(120 * time.Second); ; {
		var waiting []string
		late := false
		for i, a := range agents {
			a.mu.Lock()
			late = late || len(a.late) > 0
			a.mu.Unlock()
			if m := a.unseen(all); m > 0 {
				waiting = append(waiting, fmt.Sprintf("%s has not had %d", a.name, m))
				continue
			}
			status, raw, err := tryBearer(ctx, http.MethodGet, addr, paths[i], tokens[i], nil)
			if err != nil || status != http.StatusOK || bytes.Contains(raw, []byte(`"id"`)) {
				waiting = append(waiting, fmt.Sprintf("%s has unacknowledged items (%d)", a.name, status))
			}
		}
		if len(waiting) == 0 || late {
			// An item back after its acknowledgement fails below.
			break
		}
		if time.Now().After(deadline) {
			for _, a := range agents {
				a.mu.Lock()
				t.Logf("%s: errors %v", a.name, a.errs)
				a.mu.Unlock()
			}
			t.Fatalf("not done after %s: %s", time.Since(start).Round(time.Second), strings.Join(waiting, ", "))
		}
		time.Sleep(300 * time.Millisecond)
	}
	cancel()
	readers.Wait()

	unique := map[string]bool{}
	for _, id := range all {
		unique[id] = true
	}
	if len(unique) != lostItems+1 {
		t.Fatalf("%d distinct envelope ids for %d sends", len(unique), lostItems+1)
	}
	for _, a := range agents {
		var again, extra int
		for id, n := range a.seen {
			if !unique[id] {
				extra++
				continue
			}
			again += n - 1
		}
		var never []string
		for _, id := range all {
			if a.seen[id] == 0 {
				never = append(never, id)
			}
		}
		if len(never) > 0 {
			t.Errorf("%s never got %d items: %v…", a.name, len(never), never[:min(5, len(never))])
		}
		if len(a.late) > 0 {
			t.Errorf("%s got %d items again after the broker answered its acknowledgement: %v", a.name, len(a.late), a.late[:min(5, len(a.late))])
		}
		if len(a.errs) > 0 {
			t.Errorf("%s: unexpected answers: %v", a.name, a.errs)
		}
		t.Logf("%s: %d items, %d delivered again before their acknowledgement, %d other items (the connection request)", a.name, len(a.seen)-extra, again, extra)
	}

	// For every agent the broker lists every item as acknowledged by it,
	// and the stream holds each item and each acknowledgement once.
	for i, a := range agents {
		list := nlipAll
		if i == 1 {
			list = restAll
		}
		acked := map[string]bool{}
		for _, it := range list(t, addr, tokens[i]) {
			if it.Acked {
				acked[it.ID] = true
			}
		}
		var not []string
		for _, id := range all {
			if !acked[id] {
				not = append(not, id)
			}
		}
		if len(not) > 0 {
			t.Errorf("%s: the broker does not list %d items as acknowledged by it: %v…", a.name, len(not), not[:min(5, len(not))])
		}
	}
	subjects := inboxSubjects(t, natsOf(t, d.natsAddr), lee.personID)
	var items, acks int
	for subj, n := range subjects {
		if n != 1 {
			t.Errorf("%s holds %d messages, want 1", subj, n)
		}
		switch {
		case strings.Contains(subj, "."+streams.InboxItem+"."):
			items++
		case strings.Contains(subj, "."+streams.InboxAck+"."):
			acks++
		}
	}
	if items < lostItems+1 || acks < 3*(lostItems+1) {
		t.Errorf("lee's inbox stream: %d items and %d acknowledgements; want %d and %d", items, acks, lostItems+1, 3*(lostItems+1))
	}
	t.Logf("killed after %d of %d sends answered; ready again %s after the kill; sends done at %s; everything acknowledged at %s",
		killedAfter, lostItems, restarted.Round(time.Millisecond), sendsDone.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	d.stop(t)
}
