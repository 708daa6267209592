package nlipapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/coder/websocket"

	"github.com/alpd-project/alpd/internal/agentauth"
	"github.com/alpd-project/alpd/services/ingress/inbox"
)

// Pushing the inbox on a WebSocket (docs/nlip.md, "The inbox").
//
// A connection whose credential has alp.read watches its person's inbox
// and pushes every item the agent has not acknowledged, each once per
// connection, oldest first, as an item message (itemMessage): those
// waiting when it opens, then new ones as they arrive. It follows the
// inbox with a cursor, never a queue: the inbox's watch only says "look
// again" and never waits for the connection (inbox.Store.Watch), and the
// pusher reads the next WSPushWindow items only once the agent has shown it
// read the last ones (a ping answered after them: pongs come back in
// order). What a connection holds is one window of items; a connection
// that does not keep up — a frame not written within WSWriteTimeout, or
// the pong not back within WSWriteTimeout (plus the decision wait: the
// agent's own message may be in the middle of being handled) — is closed
// with 1008 and a reason, and costs no other connection anything. Its
// items stay unacknowledged in the inbox: the next connection gets them
// again, with the same ids.
//
// A watching connection is kept alive by the same pings instead of the
// idle timeout (an agent that only listens sends nothing), and its
// credential is checked again before pushing (the check at most
// credentialRecheck old), so an expired or revoked token ends the pushes
// and the connection.

// retryPause is the wait before trying again after the inbox could not be
// read (ErrUnavailable: NATS, identity's projection).
const retryPause = time.Second

// credentialRecheck is how old the last check of a watching connection's
// credential may be when items are pushed. Checking costs a signature
// verification, as much as the rest of a push; a token revoked or expired
// gets pushes for at most this long after (what a message the agent sends
// is checked on its own, always).
const credentialRecheck = time.Second

// Close reasons of a watching connection (at most 123 bytes).
const (
	closeTooSlow    = "too slow: pushed items were not read in time; they stay in the inbox"
	closeCredential = "credential no longer valid"
)

// push pushes the inbox of agent to the connection until ctx ends (the
// connection closed) or the connection must close.
func (w *wsConn) push(ctx context.Context, agent inbox.Agent) {
	store := w.api.s.Inbox()
	after := "" // the cursor of the last item pushed
	for ctx.Err() == nil {
		notify, stop, err := store.Watch(ctx, agent)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.api.log.Warn("nlip push: watching the inbox", "tenant", agent.Tenant, "agent", agent.AgentID, "err", err)
			if !pause(ctx, retryPause) {
				return
			}
			continue
		}
		done := w.follow(ctx, store, agent, notify, &after)
		stop()
		if done {
			return
		}
		// The watch ended with the inbox in memory (an erasure, the
		// store closing): watch again from where the pushes are.
	}
}

// follow pushes what the inbox has after *after, then what arrives, until
// the watch ends (false) or the connection is done (true).
func (w *wsConn) follow(ctx context.Context, store *inbox.Store, agent inbox.Agent, notify <-chan struct{}, after *string) bool {
	keepalive := time.NewTicker(w.api.cfg.WSIdleTimeout)
	defer keepalive.Stop()
	for {
		if done, ok := w.credentialHolds(ctx); done {
			return true
		} else if !ok {
			if !pause(ctx, retryPause) {
				return true
			}
			continue
		}
		page, err := store.List(ctx, agent, inbox.Query{After: *after, Limit: w.api.cfg.WSPushWindow})
		if err != nil {
			if ctx.Err() != nil {
				return true
			}
			w.api.log.Warn("nlip push: reading the inbox", "tenant", agent.Tenant, "agent", agent.AgentID, "err", err)
			if !pause(ctx, retryPause) {
				return true
			}
			continue
		}
		for _, it := range page.Items {
			if err := w.pushItem(ctx, it); err != nil {
				return w.tooSlow(ctx, agent, err)
			}
			*after = it.Cursor
		}
		if len(page.Items) > 0 {
			if err := w.alive(ctx); err != nil {
				return w.tooSlow(ctx, agent, err)
			}
			if page.Next != "" {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return true
		case _, open := <-notify:
			if !open {
				return ctx.Err() != nil
			}
		case <-keepalive.C:
			if err := w.alive(ctx); err != nil {
				return w.tooSlow(ctx, agent, err)
			}
		}
	}
}

// credentialHolds checks the connection's credential again: done when it
// no longer holds (the connection is then closed), !ok when it cannot be
// checked right now (revocation data stale: nothing is pushed until it
// can).
func (w *wsConn) credentialHolds(ctx context.Context) (done, ok bool) {
	if time.Since(w.checked) < credentialRecheck {
		return false, true
	}
	_, err := w.api.s.Authenticator().Authenticate(ctx, w.authorization)
	var ae *agentauth.Error
	switch {
	case err == nil:
		w.checked = time.Now()
		return false, true
	case ctx.Err() != nil:
		return true, false
	case errors.As(err, &ae) && ae.Status == http.StatusServiceUnavailable:
		return false, false
	}
	w.c.Close(websocket.StatusPolicyViolation, closeCredential)
	return true, false
}

// pushItem writes one item, within the write timeout.
func (w *wsConn) pushItem(ctx context.Context, it inbox.Item) error {
	data, err := encode(w.media, itemMessage(it))
	if err != nil {
		// Our own messages always encode; should one not, it is left in
		// the inbox (GET /nlip/inbox/{id} reads it) rather than ending
		// the connection.
		w.api.log.Error("nlip push: encoding an item", "item", it.ID, "err", err)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, w.api.cfg.WSWriteTimeout)
	defer cancel()
	if err := w.c.Write(wctx, w.frame, data); err != nil {
		return err
	}
	w.api.ws.pushed.Add(1)
	return nil
}

// alive pings the agent and waits for the pong: it comes back only once
// the agent read everything pushed before it.
func (w *wsConn) alive(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, w.pongWait)
	defer cancel()
	return w.c.Ping(pctx)
}

// tooSlow ends a connection that did not keep up (unless it ended
// already): always done.
func (w *wsConn) tooSlow(ctx context.Context, agent inbox.Agent, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	w.api.ws.tooSlow.Add(1)
	w.api.log.Info("nlip push: closing a WebSocket that does not keep up", "tenant", agent.Tenant, "person", agent.PersonID,
		"agent", agent.AgentID, "err", err)
	// A frame stuck in writing cannot be followed by the close frame: the
	// library has dropped the connection then, and this only finishes.
	w.c.Close(websocket.StatusPolicyViolation, closeTooSlow)
	return true
}

// pause waits d, or less if ctx ends (false).
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
