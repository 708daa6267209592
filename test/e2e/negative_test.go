package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestStartErrors checks that alpd refuses a bad start quickly, with the
// documented exit code and a message naming what is wrong.
func TestStartErrors(t *testing.T) {
	alpd := binaries(t).alpd
	for _, tc := range []struct {
		name string
		args []string
		// code is the exit code wanted; -1 means any non-zero code.
		code int
		want []string
	}{
		{name: "service without NATS", args: []string{"policy"}, code: -1, want: []string{"nats.urls"}},
		{name: "bad http addr", args: []string{"--http-addr", "nope"}, code: 2, want: []string{"http.addr", "nope"}},
		{name: "unknown service", args: []string{"mailer"}, code: 2, want: []string{"unknown service", "mailer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A data dir and a free HTTP port, so that if alpd did start it
			// would touch nothing outside the test.
			args := append([]string{"--data-dir", t.TempDir()}, tc.args...)
			if tc.args[0] != "--http-addr" {
				args = append(args, "--http-addr", freeAddr(t))
			}
			p := startProc(t, "alpd "+strings.Join(tc.args, " "), alpd, hermeticEnv("ALPD_TENANTS=example.org"), args...)
			code, ok := p.exitCode(10 * time.Second)
			if !ok {
				t.Fatalf("still running after 10s; want it to refuse to start")
			}
			switch {
			case tc.code == -1 && code == 0:
				t.Errorf("exit code 0, want non-zero")
			case tc.code != -1 && code != tc.code:
				t.Errorf("exit code %d, want %d", code, tc.code)
			}
			out := p.output.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not mention %q:\n%s", w, out)
				}
			}
		})
	}
}
