package loopback

import "testing"

func TestHostAndURL(t *testing.T) {
	for h, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"": false, "example.org": false, "10.0.0.1": false, "0.0.0.0": false, "localhost.example": false,
	} {
		if Host(h) != want {
			t.Errorf("Host(%q) = %v", h, !want)
		}
	}
	for u, want := range map[string]bool{
		"http://127.0.0.1:8080": true, "https://localhost/x": true, "http://[::1]:1": true,
		"https://example.org": false, "://bad": false,
	} {
		if URL(u) != want {
			t.Errorf("URL(%q) = %v", u, !want)
		}
	}
}
