// Package connlimit caps the connections one client address holds open at
// once on a listener, so that one client cannot take every connection (and
// the memory each costs) from everyone else.
//
// An IPv4 address counts alone; IPv6 addresses count per /64, since one host
// usually holds a whole /64 and could otherwise open connections from
// addresses without end. An IPv4-mapped IPv6 address counts as its IPv4
// address. A connection over the cap is closed as soon as it is accepted,
// before anything is read from it.
//
// Behind a reverse proxy or load balancer every connection comes from the
// proxy's address: raise the cap above the proxy's connection pool, or turn
// it off, and let the proxy cap its clients.
package connlimit

import (
	"net"
	"net/netip"
	"sync"
)

// Listener wraps a net.Listener with the per-address cap.
type Listener struct {
	net.Listener
	max      int
	onRefuse func(key netip.Prefix)

	mu   sync.Mutex
	open map[netip.Prefix]int
}

// New caps ln at max connections per client address (max <= 0: no cap).
// onRefuse, if set, is called with the address key of each refused
// connection (for a metric); it must not block.
func New(ln net.Listener, max int, onRefuse func(key netip.Prefix)) *Listener {
	return &Listener{Listener: ln, max: max, onRefuse: onRefuse, open: map[netip.Prefix]int{}}
}

// Key is the address a connection from addr counts against: the IPv4
// address, or the IPv6 /64.
func Key(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.WithZone("").Prefix(bits)
	return p
}

// Accept returns the next connection within the cap; connections over it
// are closed and not returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max <= 0 {
			return c, nil
		}
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			// Not an IP connection (a test's pipe): nothing to key on.
			return c, nil
		}
		key := Key(ap.Addr())
		if !l.acquire(key) {
			if l.onRefuse != nil {
				l.onRefuse(key)
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

func (l *Listener) acquire(key netip.Prefix) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] >= l.max {
		return false
	}
	l.open[key]++
	return true
}

func (l *Listener) release(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[key] <= 1 {
		delete(l.open, key)
		return
	}
	l.open[key]--
}

// Open is the number of connections key holds now.
func (l *Listener) Open(key netip.Prefix) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[key]
}

// conn gives its slot back once, when it is closed (by the server, or by a
// WebSocket handler that hijacked it).
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes a TCP connection: net/http sends its FIN this way
// before it closes a connection whose request body it did not read, so the
// client sees the answer rather than a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
