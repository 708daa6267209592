package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	policyv1 "github.com/alpd-project/alpd/gen/alp/policy/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/mtls"
)

func runCerts(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = certsCmd(args, &o, &e)
	return code, o.String(), e.String()
}

func TestCertsCreatesFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, out, errOut := runCerts("--out", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600}
	for _, r := range []string{"ingress", "identity", "policy", "federation", "ledger", "approvals", "operator"} {
		want[r+".pem"] = 0o644
		want[r+"-key.pem"] = 0o600
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("%d files, want %d", len(entries), len(want))
	}
	for name, mode := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
		if !strings.Contains(out, filepath.Join(dir, name)) {
			t.Errorf("output does not mention %s:\n%s", name, out)
		}
	}

	// Refuses to overwrite, writes nothing, says how to force.
	before, _ := os.ReadFile(filepath.Join(dir, "policy.pem"))
	code, _, errOut = runCerts("--out", dir, "--roles", "policy")
	if code != 1 || !strings.Contains(errOut, "policy.pem") || !strings.Contains(errOut, "--force") {
		t.Fatalf("overwrite: exit %d: %s", code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "policy.pem")); !bytes.Equal(before, after) {
		t.Error("a refused run changed policy.pem")
	}

	// --force replaces, with the same CA.
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	code, out, errOut = runCerts("--out", dir, "--roles", "policy", "--force", "--days", "2", "--hosts", "localhost, 127.0.0.1,alpd-policy.alpd.svc")
	if code != 0 {
		t.Fatalf("--force: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "existing CA") {
		t.Errorf("output should say the CA was reused:\n%s", out)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "policy.pem")); bytes.Equal(before, after) {
		t.Error("--force did not replace policy.pem")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(ca, after) {
		t.Error("--force replaced the CA")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "policy-key.pem")); fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced key: mode %v", fi.Mode().Perm())
	}

	// The files work for mTLS: ingress may call policy, a certificate
	// without a role may not.
	creds, err := mtls.ServerCredentials(mtls.DevFiles(dir, alpv1.Role_ROLE_POLICY))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ChainUnaryInterceptor(mtls.UnaryAuthorizer(mtls.DefaultPolicy())))
	policyv1.RegisterPolicyServiceServer(srv, certsTestPolicy{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	for _, r := range []alpv1.Role{alpv1.Role_ROLE_INGRESS, alpv1.Role_ROLE_OPERATOR} {
		opt, err := mtls.DialOptionFor(mtls.DevFiles(dir, r), alpv1.Role_ROLE_POLICY)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(lis.Addr().String(), opt)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := policyv1.NewPolicyServiceClient(cc).Ping(ctx, &policyv1.PingRequest{})
		cancel()
		cc.Close()
		if err != nil || resp.GetService() != "policy called by "+mtls.RoleName(r) {
			t.Errorf("%s: %v, %v", mtls.RoleName(r), resp, err)
		}
	}
}

type certsTestPolicy struct {
	policyv1.UnimplementedPolicyServiceServer
}

func (certsTestPolicy) Ping(ctx context.Context, _ *policyv1.PingRequest) (*policyv1.PingResponse, error) {
	r, ok := mtls.CallerRole(ctx)
	if !ok {
		return nil, grpcstatus.Error(codes.Internal, "no caller role")
	}
	return &policyv1.PingResponse{Service: "policy called by " + mtls.RoleName(r), Ready: true}, nil
}

func TestCertsAddsRolesToExistingCA(t *testing.T) {
	dir := t.TempDir()
	if code, _, errOut := runCerts("--out", dir, "--roles", "ingress"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if code, _, errOut := runCerts("--out", dir, "--roles", "Policy, ledger"); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(ca, after) {
		t.Error("adding roles replaced the CA")
	}
	for _, f := range []string{"ingress.pem", "policy.pem", "ledger-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "identity.pem")); err == nil {
		t.Error("identity.pem written though not asked for")
	}
}

func TestCertsUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "--out DIR is required"},
		{[]string{"--out", dir, "--roles", "policy,mailer"}, 2, `unknown role "mailer"`},
		{[]string{"--out", dir, "--roles", ","}, 2, "names no role"},
		{[]string{"--out", dir, "--days", "0"}, 2, "--days must be positive"},
		{[]string{"--out", dir, "--ca-days", "-1"}, 2, "--ca-days must be positive"},
		{[]string{"--out", dir, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--out", dir, "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--out", dir, "--hosts", "http://x"}, 1, "neither a DNS name nor an IP address"},
		{[]string{"--out", dir, "--days", "400", "--ca-days", "365"}, 1, "outlive"},
		{[]string{"--help"}, 0, "cert-manager"},
	} {
		code, _, errOut := runCerts(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.msg) {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit %d and %q", tc.args, code, errOut, tc.code, tc.msg)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed runs left %d files", len(entries))
	}
	// A file where the directory should be.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if code, _, errOut := runCerts("--out", file); code != 1 || !strings.Contains(errOut, file) {
		t.Errorf("--out a file: exit %d: %s", code, errOut)
	}
}
