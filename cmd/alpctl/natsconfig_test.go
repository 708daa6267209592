package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/alpd-project/alpd/internal/natsauth"
)

func natsConfig(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := natsConfigCmd(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// checkWritten checks the files are 0600, the configuration loads in
// nats-server, and each seed's public key is one of its users.
func checkWritten(t *testing.T, dir string, seeds []string) map[string][]byte {
	t.Helper()
	conf := filepath.Join(dir, "nats-server.conf")
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server rejects the configuration: %v", err)
	}
	users := map[string]bool{}
	for _, nu := range opts.Nkeys {
		users[nu.Nkey] = true
	}
	if len(users) != len(seeds) {
		t.Errorf("%d users, want %d", len(users), len(seeds))
	}
	got := map[string][]byte{}
	for _, f := range append([]string{"nats-server.conf"}, seeds...) {
		path := filepath.Join(dir, f)
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
		data, _ := os.ReadFile(path)
		got[f] = data
		if f == "nats-server.conf" {
			continue
		}
		pub, err := natsauth.PublicKeyFromSeed(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !users[pub] {
			t.Errorf("%s: its key %s is not a user of the configuration", f, pub)
		}
	}
	return got
}

var roleFiles = []string{"ingress.nk", "policy.nk", "federation.nk", "ledger.nk", "approvals.nk", "identity.nk"}

func TestNATSConfigShared(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "auth")
	store := t.TempDir()
	code, stdout, stderr := natsConfig(t, "--tenants", "a.org, b.org", "--broker-name", "acme", "--listen", "127.0.0.1:4333",
		"--store-dir", store, "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"nats-server.conf", "policy.nk", "_INBOX_acme_policy", "account ALPD"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	first := checkWritten(t, dir, roleFiles)
	conf := string(first["nats-server.conf"])
	for _, want := range []string{`"alp.send.a_org.>"`, `"alp.send.b_org.>"`, `"$JS.API.STREAM.CREATE.ACME_SEND"`, `listen: "127.0.0.1:4333"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %s", want)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("output directory: %v, %v", fi.Mode(), err)
	}

	// Seeds are credentials: never silently replaced.
	code, _, stderr = natsConfig(t, "--tenants", "a.org", "--out", dir)
	if code != 1 || !strings.Contains(stderr, "--force") || !strings.Contains(stderr, "policy.nk") {
		t.Fatalf("second run: exit %d: %s", code, stderr)
	}
	if again := checkWritten(t, dir, roleFiles); !bytes.Equal(again["policy.nk"], first["policy.nk"]) ||
		!bytes.Equal(again["nats-server.conf"], first["nats-server.conf"]) {
		t.Error("a refused run changed files")
	}
	code, _, stderr = natsConfig(t, "--tenants", "a.org", "--broker-name", "acme", "--store-dir", store, "--out", dir, "--force")
	if code != 0 {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	if forced := checkWritten(t, dir, roleFiles); bytes.Equal(forced["policy.nk"], first["policy.nk"]) {
		t.Error("--force kept the old seed")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestNATSConfigHard(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := natsConfig(t, "--isolation", "hard", "--tenants", "a.org=acme,b.org", "--store-dir", t.TempDir(),
		"--tls-cert", "/etc/nats/server.pem", "--tls-key", "/etc/nats/key.pem", "--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "_INBOX_acme_policy") || !strings.Contains(stdout, "_INBOX_b_org_policy") {
		t.Errorf("output:\n%s", stdout)
	}
	conf, err := os.ReadFile(filepath.Join(dir, "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"TENANT_A_ORG": {`, `"TENANT_B_ORG": {`, `"$JS.API.STREAM.CREATE.ACME_SEND"`, `"$JS.API.STREAM.CREATE.B_ORG_SEND"`,
		`cert_file: "/etc/nats/server.pem"`, "verify: false"} {
		if !strings.Contains(string(conf), want) {
			t.Errorf("configuration lacks %s", want)
		}
	}
	for _, tenant := range []string{"a.org", "b.org"} {
		for _, f := range roleFiles {
			if fi, err := os.Stat(filepath.Join(dir, tenant, f)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("%s/%s: %v", tenant, f, err)
			}
		}
	}
}

func TestNATSConfigBadFlags(t *testing.T) {
	out := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--out", out}, "--tenants is required"},
		{[]string{"--tenants", "a.org"}, "--out DIR is required"},
		{[]string{"--tenants", "a.org", "--out", out, "extra"}, `unexpected argument "extra"`},
		{[]string{"--tenants", "a.org", "--out", out, "--isolation", "soft"}, `isolation "soft"`},
		{[]string{"--tenants", "A.org", "--out", out}, `tenant "A.org" is not a lowercase domain`},
		{[]string{"--tenants", "a.org,a.org", "--out", out}, "listed twice"},
		{[]string{"--tenants", "a.org=acme", "--out", out}, "needs --isolation hard"},
		{[]string{"--tenants", "a.org", "--broker-name", "my broker", "--out", out}, "broker name"},
		{[]string{"--tenants", "a.org=x.y", "--isolation", "hard", "--out", out}, "broker name"},
		{[]string{"--tenants", "a.org", "--listen", "4222", "--out", out}, "listen"},
		{[]string{"--tenants", "a.org", "--tls-cert", "c.pem", "--out", out}, "both a certificate and a key"},
		{[]string{"--tenants", "a.org", "--store-dir", "", "--out", out}, "store directory"},
		{[]string{"--nope"}, "flag provided but not defined"},
	} {
		code, _, stderr := natsConfig(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("bad flags wrote %d files", len(entries))
	}
	if code, _, _ := natsConfig(t, "-h"); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}
