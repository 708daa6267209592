package connlimit_test

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/connlimit"
)

func TestKeyGroupsIPv6By64(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff::9"},
		{"::ffff:192.0.2.7", "192.0.2.7"},
		{"fe80::1%eth0", "fe80::2"},
	} {
		if ka, kb := connlimit.Key(netip.MustParseAddr(tc.a)), connlimit.Key(netip.MustParseAddr(tc.b)); ka != kb {
			t.Errorf("%s → %s and %s → %s: want one key", tc.a, ka, tc.b, kb)
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:3::1"},
		{"192.0.2.7", "192.0.2.8"},
	} {
		if ka, kb := connlimit.Key(netip.MustParseAddr(tc.a)), connlimit.Key(netip.MustParseAddr(tc.b)); ka == kb {
			t.Errorf("%s and %s share key %s", tc.a, tc.b, ka)
		}
	}
}

// closedByPeer reports whether the server side closed c (a read ends
// with EOF or a reset rather than a timeout).
func closedByPeer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err := c.Read(b[:])
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func TestConnectionsOverTheCapAreClosed(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	l := connlimit.New(raw, 2, func(netip.Prefix) { refused.Add(1) })
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	key := connlimit.Key(netip.MustParseAddr("127.0.0.1"))
	first, second := dial(), dial()
	s1, s2 := <-accepted, <-accepted
	_, _ = first, second
	if _, ok := s1.(interface{ CloseWrite() error }); !ok {
		t.Error("an accepted connection cannot half-close (net/http's FIN before closing)")
	}
	third := dial()
	if !closedByPeer(t, third) {
		t.Fatal("a third connection from one address was kept")
	}
	if refused.Load() != 1 || l.Open(key) != 2 {
		t.Fatalf("refused %d, open %d", refused.Load(), l.Open(key))
	}
	// Closing (twice) gives one slot back.
	s1.Close()
	s1.Close()
	if l.Open(key) != 1 {
		t.Fatalf("open %d after a close", l.Open(key))
	}
	dial()
	select {
	case s := <-accepted:
		s.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("a connection within the cap was not accepted")
	}
	s2.Close()
	if l.Open(key) != 0 {
		t.Fatalf("open %d after all closed", l.Open(key))
	}
}
