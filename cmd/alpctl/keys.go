package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/daemon"
	"github.com/alpd-project/alpd/internal/keystore"
)

const keysUsage = `usage (offline, on a stopped broker's key file):
  alpctl keys list   [--config FILE] [--data-dir DIR] --tenant T [--purpose P] [--json]
  alpctl keys rotate [--config FILE] [--data-dir DIR] --tenant T --purpose P
  alpctl keys retire [--config FILE] [--data-dir DIR] --tenant T --purpose P --key ID
  alpctl keys revoke [--config FILE] [--data-dir DIR] --tenant T --purpose P --key ID --compromised-at RFC3339
The key file and its key-encryption key are found as alpd finds them: the
config file (--config or ALPD_CONFIG), ALPD_* variables, keystore.path (default
<data_dir>/keystore.sealed), ALPD_KEK or keystore.kek_file (default
keystore.kek next to the key file). T is a tenant domain, or the broker name
for its federation keys; P is one of ` + "federation, ledger, token, cookie, data."

// keyPurposes are the purposes' command-line names, in the proto's order.
var keyPurposes = []alpv1.KeyPurpose{
	alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, alpv1.KeyPurpose_KEY_PURPOSE_LEDGER, alpv1.KeyPurpose_KEY_PURPOSE_TOKEN,
	alpv1.KeyPurpose_KEY_PURPOSE_COOKIE, alpv1.KeyPurpose_KEY_PURPOSE_DATA,
}

// purposeName is "federation" for KEY_PURPOSE_FEDERATION.
func purposeName(p alpv1.KeyPurpose) string {
	return strings.ToLower(strings.TrimPrefix(p.String(), "KEY_PURPOSE_"))
}

func parsePurpose(s string) (alpv1.KeyPurpose, error) {
	for _, p := range keyPurposes {
		if s == purposeName(p) {
			return p, nil
		}
	}
	names := make([]string, len(keyPurposes))
	for i, p := range keyPurposes {
		names[i] = purposeName(p)
	}
	return 0, fmt.Errorf("--purpose %q is not one of %s", s, strings.Join(names, ", "))
}

// keysCmd runs the offline key commands. Exit codes: 0 done, 1 the key
// file or the change failed, 2 usage.
func keysCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, keysUsage)
		return exitUsage
	}
	sub := args[0]
	if !slices.Contains([]string{"list", "rotate", "retire", "revoke"}, sub) {
		fmt.Fprintf(stderr, "alpctl keys: unknown command %q\n%s\n", sub, keysUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String("config", "", "alpd's config file (default: env ALPD_CONFIG)")
	dataDir := fs.String("data-dir", "", "alpd's data directory, as alpd --data-dir")
	tenant := fs.String("tenant", "", "tenant domain, or the broker name for federation keys")
	purposeFlag := fs.String("purpose", "", "federation, ledger, token, cookie or data")
	keyID := fs.String("key", "", "key id (as keys list prints it)")
	compromised := fs.String("compromised-at", "", "RFC 3339 instant from which the key is distrusted")
	asJSON := fs.Bool("json", false, "print the keys as JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "alpctl keys %s: %s\n", sub, fmt.Sprintf(format, a...))
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	if *tenant == "" {
		return usage("--tenant is required")
	}
	var purposes []alpv1.KeyPurpose
	switch {
	case *purposeFlag != "":
		p, err := parsePurpose(*purposeFlag)
		if err != nil {
			return usage("%v", err)
		}
		purposes = []alpv1.KeyPurpose{p}
	case sub == "list":
		purposes = keyPurposes
	default:
		return usage("--purpose is required")
	}
	if (sub == "retire" || sub == "revoke") && *keyID == "" {
		return usage("--key is required")
	}
	if sub != "retire" && sub != "revoke" && *keyID != "" {
		return usage("--key is only for retire and revoke")
	}
	var at time.Time
	if sub == "revoke" {
		if *compromised == "" {
			return usage("--compromised-at is required (the first instant the key may have been known to someone else; when unknown, its creation time from keys list)")
		}
		var err error
		if at, err = time.Parse(time.RFC3339, *compromised); err != nil {
			return usage("--compromised-at %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", *compromised)
		}
	} else if *compromised != "" {
		return usage("--compromised-at is only for revoke")
	}
	if *asJSON && sub != "list" {
		return usage("--json is only for list")
	}

	ks, err := openKeyFile(*configFile, *dataDir, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "alpctl keys %s: %v\n", sub, err)
		return exitFailed
	}
	ctx := context.Background()
	p := purposes[0]
	switch sub {
	case "list":
		var all []keystore.KeyInfo
		for _, p := range purposes {
			keys, err := ks.Keys(ctx, *tenant, p)
			if err != nil {
				fmt.Fprintf(stderr, "alpctl keys list: %v\n", err)
				return exitFailed
			}
			all = append(all, keys...)
		}
		if *asJSON {
			return printKeysJSON(stdout, stderr, all)
		}
		printKeys(stdout, all)
		return 0
	case "rotate":
		k, err := ks.Rotate(ctx, *tenant, p)
		if err != nil {
			fmt.Fprintf(stderr, "alpctl keys rotate: %v\n", err)
			return exitFailed
		}
		fmt.Fprintf(stdout, "%s is the active %s key of %s; the previous one, if any, is retired\n", k.KeyID, purposeName(p), *tenant)
	case "retire":
		if err := ks.Retire(ctx, *tenant, p, *keyID); err != nil {
			fmt.Fprintf(stderr, "alpctl keys retire: %v\n", err)
			return exitFailed
		}
		fmt.Fprintf(stdout, "%s is retired: it verifies and unwraps what it made, and makes nothing new\n", *keyID)
	case "revoke":
		if err := ks.Revoke(ctx, *tenant, p, *keyID, at); err != nil {
			fmt.Fprintf(stderr, "alpctl keys revoke: %v\n", err)
			return exitFailed
		}
		// The store moves a time before the key's creation to its creation.
		keys, err := ks.Keys(ctx, *tenant, p)
		if err != nil {
			fmt.Fprintf(stderr, "alpctl keys revoke: %v\n", err)
			return exitFailed
		}
		for _, k := range keys {
			if k.KeyID == *keyID {
				at = k.CompromisedAt
			}
		}
		fmt.Fprintf(stdout, "%s is revoked: everything it made at or after %s is void\n", *keyID, rfc3339(at))
	}
	return 0
}

// openKeyFile opens the key file of the broker configured by configFile
// (else ALPD_CONFIG), dataDir and the ALPD_* variables, with its KEK, as
// alpd would (config.Load, daemon.ReadKEK), but refuses to create either:
// a wrong path must not produce an empty key file.
func openKeyFile(configFile, dataDir string, env func(string) string) (*keystore.FileStore, error) {
	var args []string
	if configFile != "" {
		args = append(args, "--config", configFile)
	}
	if dataDir != "" {
		args = append(args, "--data-dir", dataDir)
	}
	cfg, _, err := config.Load(args, env)
	if err != nil {
		return nil, fmt.Errorf("alpd's configuration: %w", err)
	}
	path := cfg.KeystorePath()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no key file at %s (keystore.path, or keystore.sealed in data_dir %s): give the broker's --config or --data-dir", path, cfg.DataDir)
	}
	kek, err := daemon.ReadKEK(cfg, env)
	if err != nil {
		return nil, fmt.Errorf("the key-encryption key of %s: %w", path, err)
	}
	ks, err := keystore.OpenFile(path, kek)
	if errors.Is(err, keystore.ErrBadKEK) {
		return nil, fmt.Errorf("%w (ALPD_KEK or keystore.kek_file is not the one this key file was sealed with)", err)
	}
	return ks, err
}

func printKeys(w io.Writer, keys []keystore.KeyInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPURPOSE\tSTATE\tCREATED\tCOMPROMISED AT\tPUBLIC KEY")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.KeyID, purposeName(k.Purpose),
			strings.ToLower(strings.TrimPrefix(k.State.String(), "KEY_STATE_")), rfc3339(k.Created), orDash(rfc3339(k.CompromisedAt)),
			orDash(base64.RawURLEncoding.EncodeToString(k.PublicKey)))
	}
	tw.Flush()
}

// keyJSON is one key as keys list --json prints it.
type keyJSON struct {
	ID            string `json:"id"`
	Tenant        string `json:"tenant"`
	Purpose       string `json:"purpose"`
	Algorithm     string `json:"algorithm"`
	State         string `json:"state"`
	Created       string `json:"created"`
	CompromisedAt string `json:"compromised_at,omitempty"`
	// PublicKey is base64url without padding; empty for symmetric keys.
	PublicKey string `json:"public_key,omitempty"`
}

func printKeysJSON(stdout, stderr io.Writer, keys []keystore.KeyInfo) int {
	out := make([]keyJSON, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyJSON{ID: k.KeyID, Tenant: k.Tenant, Purpose: purposeName(k.Purpose), Algorithm: k.Algorithm,
			State: strings.ToLower(strings.TrimPrefix(k.State.String(), "KEY_STATE_")), Created: rfc3339(k.Created),
			CompromisedAt: rfc3339(k.CompromisedAt), PublicKey: base64.RawURLEncoding.EncodeToString(k.PublicKey)})
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "alpctl keys list: %v\n", err)
		return exitFailed
	}
	return 0
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
