package nlipapi

import (
	"errors"
	"github.com/alpd-project/alpd/internal/httpjson"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/alpd-project/alpd/services/ingress"
)

// wsLimits bound what WebSocket connections may cost all together: how many
// sockets one agent and one person may hold open, and how many bytes of
// messages still being received may be buffered at once. A WebSocket
// message is only useful whole (it is decoded as one NLIP message), so a
// connection must buffer it while it arrives; without a shared bound, every
// socket could hold a message just under the size limit, and a few hundred
// sockets would cost hundreds of MiB.
type wsLimits struct {
	maxPerAgent, maxPerPerson int
	// budget bounds the buffered bytes of every connection together;
	// perPerson bounds one person's share (a quarter of budget), so one
	// person's sockets cannot take all of it from everyone else.
	budget, perPerson int64

	mu       sync.Mutex
	open     int
	byAgent  map[string]int
	byPerson map[string]int
	held     int64
	heldBy   map[string]int64

	received atomic.Int64
	// pushed counts inbox items pushed; tooSlow the connections closed
	// for not keeping up with them.
	pushed, tooSlow atomic.Int64
}

// personShare is the part of the read budget one person may hold.
const personShare = 4

// minReadBuffer is the first buffer of a message (most fit in it).
const minReadBuffer = 4 << 10

func newWSLimits(cfg Config) *wsLimits {
	return &wsLimits{
		maxPerAgent: cfg.WSMaxPerAgent, maxPerPerson: cfg.WSMaxPerPerson,
		budget: cfg.WSReadBuffer,
		// A person may always receive two messages at the size limit.
		perPerson: min(max(cfg.WSReadBuffer/personShare, 2*int64(cfg.Message.MaxMessageBytes)+2), cfg.WSReadBuffer),
		byAgent:   map[string]int{}, byPerson: map[string]int{}, heldBy: map[string]int64{},
	}
}

// admit counts a new socket of snd, or refuses it (429) when the agent or
// the person already holds the most allowed. Call release when it closes.
func (l *wsLimits) admit(snd ingress.Sender) (release func(), _ *httpjson.Error) {
	agent, person := snd.Tenant+"/"+snd.AgentID, personKey(snd)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.byAgent[agent] >= l.maxPerAgent:
		return nil, newError(http.StatusTooManyRequests, "too_many_websockets",
			"this agent already has %d WebSocket connections open, the most allowed; close one first", l.maxPerAgent)
	case l.byPerson[person] >= l.maxPerPerson:
		return nil, newError(http.StatusTooManyRequests, "too_many_websockets",
			"this person's agents already have %d WebSocket connections open, the most allowed; close one first", l.maxPerPerson)
	}
	l.byAgent[agent]++
	l.byPerson[person]++
	l.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.open--
			decrement(l.byAgent, agent)
			decrement(l.byPerson, person)
		})
	}, nil
}

func decrement(m map[string]int, key string) {
	if m[key] <= 1 {
		delete(m, key)
		return
	}
	m[key]--
}

// personKey names snd's person in the read budget.
func personKey(snd ingress.Sender) string { return snd.Tenant + "/" + snd.PersonID }

// take reserves n buffer bytes for person, or reports false when that
// would exceed the budget or the person's share.
func (l *wsLimits) take(person string, n int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held+n > l.budget || l.heldBy[person]+n > l.perPerson {
		return false
	}
	l.held += n
	l.heldBy[person] += n
	return true
}

// give returns n bytes taken for person.
func (l *wsLimits) give(person string, n int64) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held -= n
	if l.heldBy[person] <= n {
		delete(l.heldBy, person)
	} else {
		l.heldBy[person] -= n
	}
}

// errReadBudget: the message does not fit in what is left of the budget.
var errReadBudget = errors.New("nlipapi: WebSocket read budget exhausted")

// read reads one message from r into buffers drawn from the budget: a
// first small one, then chunks taken only as bytes arrive, so a message
// that is announced large but sent slowly holds only what came, and
// nothing is copied (or left as garbage) while it grows. A message in more
// than one chunk is joined once it is whole; the chunks' reservation
// stands for the joined copy, so for a moment a whole message costs up to
// twice what is reserved. It returns the message and the bytes reserved, to
// give back once the message is handled; on an error nothing is held. limit
// is the connection's read limit: the library ends a message past it on
// the read after limit+1 bytes, so no more is ever reserved.
func (l *wsLimits) read(person string, r io.Reader, limit int64) ([]byte, int64, error) {
	var chunks [][]byte
	var held, total int64
	fail := func(err error) ([]byte, int64, error) {
		recycle(chunks)
		l.give(person, held)
		return nil, 0, err
	}
	for {
		if len(chunks) == 0 || len(chunks[len(chunks)-1]) == cap(chunks[len(chunks)-1]) {
			size := int64(readChunk)
			if len(chunks) == 0 {
				size = minReadBuffer
			}
			size = min(size, limit+1-total)
			if size == 0 {
				// Past the limit: this read is the library's refusal.
				if _, err := r.Read(nil); err != nil {
					return fail(err)
				}
				return fail(errOverLimit)
			}
			if !l.take(person, size) {
				return fail(errReadBudget)
			}
			held += size
			chunks = append(chunks, newChunk(size))
		}
		c := chunks[len(chunks)-1]
		n, err := r.Read(c[len(c):cap(c)])
		chunks[len(chunks)-1] = c[:len(c)+n]
		total += int64(n)
		l.received.Add(int64(n))
		if errors.Is(err, io.EOF) {
			return join(chunks, total), held, nil
		}
		if err != nil {
			return fail(err)
		}
	}
}

// readChunk is the size of every buffer of a message after the first.
const readChunk = 64 << 10

// join makes one message of its chunks. A single chunk is the message
// (and never recycled: the decoded message may point into it); chunks
// copied out are recycled.
func join(chunks [][]byte, total int64) []byte {
	if len(chunks) == 1 {
		return chunks[0]
	}
	out := make([]byte, 0, total)
	for _, c := range chunks {
		out = append(out, c...)
	}
	recycle(chunks)
	return out
}

// chunkPool keeps full-size chunks of messages that were refused or joined,
// so that connections turned away from the budget and taken in again do
// not leave a chunk of garbage each time: under a flood the heap stays
// near what the budget holds instead of growing to the collector's goal.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, readChunk); return &b }}

func newChunk(size int64) []byte {
	if size != readChunk {
		return make([]byte, 0, size)
	}
	return (*chunkPool.Get().(*[]byte))[:0]
}

func recycle(cs [][]byte) {
	for _, c := range cs {
		if cap(c) == readChunk {
			c = c[:0]
			chunkPool.Put(&c)
		}
	}
}

// errOverLimit: a message went past the read limit without the library
// refusing it (it always does; this keeps read from spinning if not).
var errOverLimit = errors.New("nlipapi: WebSocket message over the read limit")

// discard reads the rest of a message that will not be handled, keeping
// none of it.
func (l *wsLimits) discard(r io.Reader) error {
	var scratch [8 << 10]byte
	for {
		n, err := r.Read(scratch[:])
		l.received.Add(int64(n))
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// WebSocketStats describe the NLIP WebSocket connections now.
type WebSocketStats struct {
	// Open is the number of open connections.
	Open int
	// BufferedBytes are held by messages being received or handled, at most
	// nlip.ws_read_buffer_bytes.
	BufferedBytes int64
	// ReceivedBytes counts message bytes read since the start, kept or
	// discarded.
	ReceivedBytes int64
	// PushedItems counts inbox items pushed since the start;
	// ClosedTooSlow the connections closed for not reading them in time.
	PushedItems, ClosedTooSlow int64
}

// WebSocketStats reports the WebSocket connections' counts and buffers.
func (a *API) WebSocketStats() WebSocketStats {
	l := a.ws
	l.mu.Lock()
	defer l.mu.Unlock()
	return WebSocketStats{Open: l.open, BufferedBytes: l.held, ReceivedBytes: l.received.Load(),
		PushedItems: l.pushed.Load(), ClosedTooSlow: l.tooSlow.Load()}
}
