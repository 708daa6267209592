package discovery

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func newPlainServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}
