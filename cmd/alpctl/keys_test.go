package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/keystore"
)

// keysBroker is a stopped broker's data dir as alpd leaves it: a config
// file, the development KEK where alpd generates it and the key file with
// a federation key for the broker name and a ledger key for its tenant.
func keysBroker(t *testing.T) (configFile, dataDir string, fed keystore.KeyInfo) {
	t.Helper()
	for _, k := range []string{"ALPD_CONFIG", "ALPD_KEK", "ALPD_DATA_DIR", "ALPD_TENANTS"} {
		t.Setenv(k, "")
	}
	dataDir = t.TempDir()
	configFile = filepath.Join(t.TempDir(), "alpd.yaml")
	if err := os.WriteFile(configFile, []byte("broker: {tenants: [{domain: a.example}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kek := keystore.GenerateKEK()
	if err := os.WriteFile(filepath.Join(dataDir, config.KEKFileName), []byte(keystore.EncodeKEK(kek)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks, err := keystore.OpenFile(filepath.Join(dataDir, config.KeystoreFileName), kek)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if fed, err = ks.Generate(ctx, "broker.a.example", alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Generate(ctx, "a.example", alpv1.KeyPurpose_KEY_PURPOSE_LEDGER); err != nil {
		t.Fatal(err)
	}
	return configFile, dataDir, fed
}

func runKeys(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(append([]string{"keys"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func listKeys(t *testing.T, configFile, dataDir, tenant string) []keyJSON {
	t.Helper()
	code, out, errs := runKeys(t, "list", "--config", configFile, "--data-dir", dataDir, "--tenant", tenant, "--json")
	if code != 0 {
		t.Fatalf("keys list: %d %s", code, errs)
	}
	var keys []keyJSON
	if err := json.Unmarshal([]byte(out), &keys); err != nil {
		t.Fatalf("keys list --json: %v in %s", err, out)
	}
	return keys
}

// TestKeysLifecycle rotates, retires and revokes the broker's federation
// key offline and reads the result back from the key file itself.
func TestKeysLifecycle(t *testing.T) {
	cf, dd, fed := keysBroker(t)
	keys := listKeys(t, cf, dd, "broker.a.example")
	if len(keys) != 1 || keys[0].ID != fed.KeyID || keys[0].State != "active" || keys[0].Purpose != "federation" || keys[0].PublicKey == "" {
		t.Fatalf("keys of broker.a.example: %+v", keys)
	}
	code, out, errs := runKeys(t, "list", "--config", cf, "--data-dir", dd, "--tenant", "a.example", "--purpose", "ledger")
	if code != 0 || !strings.Contains(out, "ledger-") || !strings.Contains(out, "active") {
		t.Fatalf("keys list table: %d %s %s", code, out, errs)
	}

	code, out, errs = runKeys(t, "rotate", "--config", cf, "--data-dir", dd, "--tenant", "broker.a.example", "--purpose", "federation")
	if code != 0 {
		t.Fatalf("rotate: %d %s", code, errs)
	}
	keys = listKeys(t, cf, dd, "broker.a.example")
	if len(keys) != 2 || keys[0].State != "retired" || keys[1].State != "active" || !strings.Contains(out, keys[1].ID) {
		t.Fatalf("after rotate: %+v (%s)", keys, out)
	}
	newID := keys[1].ID

	code, _, errs = runKeys(t, "retire", "--config", cf, "--data-dir", dd, "--tenant", "broker.a.example", "--purpose", "federation", "--key", newID)
	if code != 0 {
		t.Fatalf("retire: %d %s", code, errs)
	}
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	code, out, errs = runKeys(t, "revoke", "--config", cf, "--data-dir", dd, "--tenant", "broker.a.example", "--purpose", "federation",
		"--key", fed.KeyID, "--compromised-at", at.Format(time.RFC3339))
	if code != 0 {
		t.Fatalf("revoke: %d %s", code, errs)
	}
	// A compromise before the key existed is its creation.
	if at.Before(fed.Created) {
		at = fed.Created
	}
	if !strings.Contains(out, rfc3339(at)) {
		t.Errorf("revoke says %q, want the compromise time %s", out, rfc3339(at))
	}

	// What alpd will read: the file, opened on its own.
	ks, err := keystore.OpenFile(filepath.Join(dd, config.KeystoreFileName), mustKEK(t, dd))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ks.Keys(context.Background(), "broker.a.example", alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION)
	if err != nil || len(got) != 2 {
		t.Fatalf("keys in the file: %v %+v", err, got)
	}
	if got[0].State != alpv1.KeyState_KEY_STATE_REVOKED || !got[0].CompromisedAt.Equal(at) || got[1].State != alpv1.KeyState_KEY_STATE_RETIRED {
		t.Fatalf("keys in the file: %+v", got)
	}
}

func mustKEK(t *testing.T, dataDir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, config.KEKFileName))
	if err != nil {
		t.Fatal(err)
	}
	kek, err := keystore.ParseKEK(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return kek
}

// TestKeysErrors: each mistake gets its own message and exit code, and
// none of them writes a key file.
func TestKeysErrors(t *testing.T) {
	cf, dd, fed := keysBroker(t)
	empty := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, exitUsage, "usage"},
		{"unknown command", []string{"burn"}, exitUsage, `unknown command "burn"`},
		{"no tenant", []string{"list", "--config", cf}, exitUsage, "--tenant is required"},
		{"bad purpose", []string{"list", "--config", cf, "--tenant", "a.example", "--purpose", "signing"}, exitUsage, `--purpose "signing" is not one of federation, ledger, token, cookie, data`},
		{"rotate without purpose", []string{"rotate", "--config", cf, "--tenant", "a.example"}, exitUsage, "--purpose is required"},
		{"retire without key", []string{"retire", "--config", cf, "--tenant", "a.example", "--purpose", "ledger"}, exitUsage, "--key is required"},
		{"revoke without time", []string{"revoke", "--config", cf, "--tenant", "a.example", "--purpose", "ledger", "--key", "x"}, exitUsage, "--compromised-at is required"},
		{"revoke with a bad time", []string{"revoke", "--config", cf, "--tenant", "a.example", "--purpose", "ledger", "--key", "x", "--compromised-at", "yesterday"}, exitUsage, `--compromised-at "yesterday" is not an RFC 3339 time`},
		{"compromised-at on rotate", []string{"rotate", "--config", cf, "--tenant", "a.example", "--purpose", "ledger", "--compromised-at", "2026-01-01T00:00:00Z"}, exitUsage, "--compromised-at is only for revoke"},
		{"no key file", []string{"list", "--config", cf, "--data-dir", empty, "--tenant", "a.example"}, exitFailed, "no key file at " + filepath.Join(empty, config.KeystoreFileName)},
		{"bad config", []string{"list", "--config", filepath.Join(empty, "nope.yaml"), "--tenant", "a.example"}, exitFailed, "alpd's configuration"},
		{"unknown key", []string{"retire", "--config", cf, "--data-dir", dd, "--tenant", "broker.a.example", "--purpose", "federation", "--key", "federation-nope"}, exitFailed, `retire "federation-nope" of broker.a.example: key not found`},
		{"future compromise", []string{"revoke", "--config", cf, "--data-dir", dd, "--tenant", "broker.a.example", "--purpose", "federation", "--key", fed.KeyID,
			"--compromised-at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, exitFailed, "is in the future"},
		{"bad tenant", []string{"list", "--config", cf, "--data-dir", dd, "--tenant", "Broker.A.example"}, exitFailed, "must be lowercase"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := runKeys(t, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, tt.code, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(empty, config.KeystoreFileName)); err == nil {
		t.Error("a key file was created in the empty data dir")
	}

	// Another broker's KEK does not open the file.
	t.Setenv("ALPD_KEK", keystore.EncodeKEK(keystore.GenerateKEK()))
	code, _, errs := runKeys(t, "list", "--config", cf, "--data-dir", dd, "--tenant", "a.example")
	if code != exitFailed || !strings.Contains(errs, "bad key-encryption key") || !strings.Contains(errs, "not the one this key file was sealed with") {
		t.Fatalf("wrong KEK: %d %s", code, errs)
	}
	// And the right one given by ALPD_KEK does, as alpd reads it.
	t.Setenv("ALPD_KEK", keystore.EncodeKEK(mustKEK(t, dd)))
	if code, _, errs := runKeys(t, "list", "--config", cf, "--data-dir", dd, "--tenant", "a.example"); code != 0 {
		t.Fatalf("ALPD_KEK: %d %s", code, errs)
	}
}
