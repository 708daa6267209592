package httproute

import (
	"net/http"
	"time"
)

// progressWriter gives every Write and Flush of a streaming answer the
// server's write timeout from when it starts, until the handler sets a
// write deadline of its own (through http.ResponseController), which then
// stands. The deadline is moved at most
// once a second (or a tenth of the timeout, if shorter): each move costs a
// timer update, and that much less does not matter against the timeout.
type progressWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	every   time.Duration
	moved   time.Time
	own     bool
}

func newProgressWriter(w http.ResponseWriter, rc *http.ResponseController, timeout time.Duration) *progressWriter {
	p := &progressWriter{ResponseWriter: w, rc: rc, timeout: timeout, every: min(time.Second, timeout/10)}
	p.extend()
	return p
}

func (p *progressWriter) extend() {
	if p.own {
		return
	}
	now := time.Now()
	if now.Sub(p.moved) < p.every {
		return
	}
	p.moved = now
	_ = p.rc.SetWriteDeadline(now.Add(p.timeout))
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.extend()
	return p.ResponseWriter.Write(b)
}

// FlushError is what http.ResponseController.Flush calls first.
func (p *progressWriter) FlushError() error {
	p.extend()
	return p.rc.Flush()
}

// Flush serves handlers that assert http.Flusher.
func (p *progressWriter) Flush() { _ = p.FlushError() }

// SetWriteDeadline is what http.ResponseController.SetWriteDeadline calls
// first: the handler's deadline replaces the progress deadline.
func (p *progressWriter) SetWriteDeadline(d time.Time) error {
	p.own = true
	return p.rc.SetWriteDeadline(d)
}

// Unwrap lets http.ResponseController (and WebSocket libraries) reach the
// connection, e.g. to hijack it.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
