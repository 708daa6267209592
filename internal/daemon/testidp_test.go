package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alpd-project/alpd/internal/config"
)

func testIdPConfig(t *testing.T, dataDir string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.Broker.Tenants = []config.Tenant{{Domain: "example.org"}}
	cfg.Identity.TestIdP = config.TestIdP{Enabled: true, Listen: "127.0.0.1:0",
		Users: []config.TestUser{{Username: "ana", Password: "pw"}}}
	return cfg
}

func (d *Daemon) closeTestIdPs() {
	for _, idp := range d.testIdPs {
		_ = idp.Close()
	}
	d.testIdPs = nil
}

// Finding 10: the test IdP's issuer came from a random port, so every
// restart of alpd made a new issuer, and with it a new person for every
// address. Now a restart comes back at the same issuer.
func TestTestIdPKeepsItsIssuerAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	cfg := testIdPConfig(t, dir)
	d := &Daemon{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	first, err := d.startTestIdP(cfg, "example.org")
	if err != nil {
		t.Fatal(err)
	}
	d.closeTestIdPs()
	if strings.HasSuffix(first.Issuer, ":0") {
		t.Fatalf("issuer %s", first.Issuer)
	}
	again, err := d.startTestIdP(cfg, "example.org")
	if err != nil {
		t.Fatal(err)
	}
	defer d.closeTestIdPs()
	if again.Issuer != first.Issuer {
		t.Fatalf("issuer after a restart %s, before %s", again.Issuer, first.Issuer)
	}
	if info, err := os.Stat(filepath.Join(dir, "test-idp", "example.org.issuer")); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("kept issuer file: %v %v", info, err)
	}
	// Its port taken by something else: a clear error, not a new issuer.
	if _, err := d.startTestIdP(cfg, "example.org"); err == nil || !strings.Contains(err.Error(), "must come back at its issuer") {
		t.Fatalf("port in use: %v", err)
	}
}

// A fixed port needs nothing kept; a damaged file is reported.
func TestTestIdPIssuerFile(t *testing.T) {
	dir := t.TempDir()
	cfg := testIdPConfig(t, dir)
	d := &Daemon{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	fixed := cfg
	fixed.Identity.TestIdP.Listen = "127.0.0.1:8123"
	if file, issuer, err := d.keptTestIdPIssuer(fixed, "example.org"); file != "" || issuer != "" || err != nil {
		t.Fatalf("fixed port: %q %q %v", file, issuer, err)
	}
	file := filepath.Join(dir, "test-idp", "example.org.issuer")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("ftp://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.keptTestIdPIssuer(cfg, "example.org"); err == nil || !strings.Contains(err.Error(), "not the test IdP's issuer") {
		t.Fatalf("damaged file: %v", err)
	}
}
