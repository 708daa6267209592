package mtls

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

func TestWriteDevCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	opts := DevOptions{Roles: []alpv1.Role{alpv1.Role_ROLE_POLICY, alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_POLICY},
		Hosts: localHosts, Validity: time.Hour}
	res, err := WriteDevCerts(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.CAReused || len(res.Written) != 6 {
		t.Errorf("result %+v", res)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory: %v, %v", fi.Mode(), err)
	}
	for name, mode := range map[string]os.FileMode{
		"ca.pem": 0o644, "ca-key.pem": 0o600, "policy.pem": 0o644, "policy-key.pem": 0o600, "ingress.pem": 0o644, "ingress-key.pem": 0o600,
	} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 6 {
		t.Errorf("%d entries in %s, want 6 (no temporary files left)", len(entries), dir)
	}

	// The certificates work.
	addr := startServer(t, DevFiles(dir, alpv1.Role_ROLE_POLICY), DefaultPolicy())
	if caller, _, err := pingPolicy(t, addr, dialOpt(t, DevFiles(dir, alpv1.Role_ROLE_INGRESS))); err != nil || caller != "ingress" {
		t.Fatalf("ping with the written certificates: %q, %v", caller, err)
	}

	// Existing role files are not replaced, and nothing is written.
	policySerial := serialOf(t, DevFiles(dir, alpv1.Role_ROLE_POLICY).Cert)
	_, err = WriteDevCerts(dir, DevOptions{Roles: []alpv1.Role{alpv1.Role_ROLE_LEDGER, alpv1.Role_ROLE_POLICY}, Validity: time.Hour})
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "policy.pem") || !strings.Contains(err.Error(), "policy-key.pem") {
		t.Fatalf("overwrite: %v", err)
	}
	if _, err := os.Stat(DevFiles(dir, alpv1.Role_ROLE_LEDGER).Cert); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused run wrote ledger.pem: %v", err)
	}

	// New roles are added with the same CA: they can talk to the old ones.
	caBefore, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	res, err = WriteDevCerts(dir, DevOptions{Roles: []alpv1.Role{alpv1.Role_ROLE_LEDGER}, Hosts: localHosts, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CAReused || !slices.Equal(res.Written, []string{filepath.Join(dir, "ledger.pem"), filepath.Join(dir, "ledger-key.pem")}) {
		t.Errorf("adding a role: %+v", res)
	}
	if caAfter, _ := os.ReadFile(filepath.Join(dir, CACertFile)); string(caAfter) != string(caBefore) {
		t.Error("the CA changed when a role was added")
	}
	if caller, _, err := pingPolicy(t, addr, dialOpt(t, DevFiles(dir, alpv1.Role_ROLE_LEDGER))); err != nil || caller != "ledger" {
		t.Fatalf("ping from the added role: %q, %v", caller, err)
	}

	// Force replaces, with the same CA; the running server rotates to it.
	if _, err := WriteDevCerts(dir, DevOptions{Roles: []alpv1.Role{alpv1.Role_ROLE_POLICY}, Hosts: localHosts, Validity: time.Hour, Force: true}); err != nil {
		t.Fatal(err)
	}
	newSerial := serialOf(t, DevFiles(dir, alpv1.Role_ROLE_POLICY).Cert)
	if newSerial.Cmp(policySerial) == 0 {
		t.Error("--force did not replace policy.pem")
	}
	if fi, _ := os.Stat(DevFiles(dir, alpv1.Role_ROLE_POLICY).Key); fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced key has mode %v", fi.Mode().Perm())
	}
	if _, got, err := pingPolicy(t, addr, dialOpt(t, DevFiles(dir, alpv1.Role_ROLE_INGRESS))); err != nil || got.Cmp(newSerial) != 0 {
		t.Errorf("after --force: serial %v, %v; want %v", got, err, newSerial)
	}
}

func TestWriteDevCertsErrors(t *testing.T) {
	ok := DevOptions{Validity: time.Hour}
	if _, err := WriteDevCerts("", ok); err == nil {
		t.Error("empty directory accepted")
	}
	if _, err := WriteDevCerts(t.TempDir(), DevOptions{}); err == nil {
		t.Error("zero validity accepted")
	}
	if _, err := WriteDevCerts(t.TempDir(), DevOptions{Validity: time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_UNSPECIFIED}}); err == nil {
		t.Error("unspecified role accepted")
	}
	if _, err := WriteDevCerts(t.TempDir(), DevOptions{Validity: time.Hour, Roles: []alpv1.Role{}}); err == nil {
		t.Error("no roles accepted")
	}
	if _, err := WriteDevCerts(t.TempDir(), DevOptions{Validity: time.Hour, Hosts: []string{"http://x"}}); err == nil {
		t.Error("bad host accepted")
	}
	dir := t.TempDir()
	if _, err := WriteDevCerts(dir, DevOptions{Validity: 48 * time.Hour, CAValidity: 24 * time.Hour}); err == nil || !strings.Contains(err.Error(), "outlive") {
		t.Errorf("certificates outliving the CA: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed run left %d files", len(entries))
	}

	// A CA certificate without its key, or the reverse.
	dir = t.TempDir()
	if _, err := WriteDevCerts(dir, DevOptions{Validity: time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_POLICY}}); err != nil {
		t.Fatal(err)
	}
	os.Rename(filepath.Join(dir, CAKeyFile), filepath.Join(dir, "away"))
	_, err := WriteDevCerts(dir, DevOptions{Validity: time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_LEDGER}})
	if err == nil || !strings.Contains(err.Error(), CAKeyFile) {
		t.Errorf("missing CA key: %v", err)
	}
	os.Rename(filepath.Join(dir, "away"), filepath.Join(dir, CAKeyFile))
	os.Remove(filepath.Join(dir, CACertFile))
	_, err = WriteDevCerts(dir, DevOptions{Validity: time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_LEDGER}})
	if err == nil || !strings.Contains(err.Error(), CACertFile) {
		t.Errorf("missing CA certificate: %v", err)
	}
	// A corrupt CA is named.
	os.WriteFile(filepath.Join(dir, CACertFile), []byte("junk"), 0o644)
	_, err = WriteDevCerts(dir, DevOptions{Validity: time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_LEDGER}})
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, CACertFile)) {
		t.Errorf("corrupt CA: %v", err)
	}
	// An existing CA that expires too soon for the certificates asked for.
	dir = t.TempDir()
	if _, err := WriteDevCerts(dir, DevOptions{Validity: time.Hour, CAValidity: 2 * time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_POLICY}}); err != nil {
		t.Fatal(err)
	}
	_, err = WriteDevCerts(dir, DevOptions{Validity: 3 * time.Hour, Roles: []alpv1.Role{alpv1.Role_ROLE_LEDGER}})
	if err == nil || !strings.Contains(err.Error(), "expires") || !strings.Contains(err.Error(), CACertFile) {
		t.Errorf("CA expiring too soon: %v", err)
	}
}
