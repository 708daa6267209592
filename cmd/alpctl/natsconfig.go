package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/alpd-project/alpd/internal/natsauth"
)

// natsConfigCmd is `alpctl nats-config`: it writes a nats-server
// configuration with one nkey user per service role (permissions from
// internal/natsauth, see docs/nats-permissions.md) and a seed file per user.
// Exit codes: 0 written, 1 could not write (or seeds exist), 2 bad flags.
func natsConfigCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nats-config", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokerName := fs.String("broker-name", "", "broker `name` (its namespace on NATS); shared isolation: default alpd; hard isolation: the name of every tenant's broker not named in --tenants (default: derived from the tenant)")
	tenants := fs.String("tenants", "", "tenant `domains`, comma-separated (required); in hard isolation domain=name names that tenant's broker")
	isolation := fs.String("isolation", string(natsauth.Shared), "`mode`: shared (one account for the broker) or hard (one account and broker per tenant)")
	listen := fs.String("listen", "0.0.0.0:4222", "client listener `host:port` of the NATS server")
	storeDir := fs.String("store-dir", "/data/jetstream", "JetStream store `directory` on the NATS server")
	tlsCert := fs.String("tls-cert", "", "server certificate `file` (path on the NATS server); makes TLS required")
	tlsKey := fs.String("tls-key", "", "server certificate key `file` (path on the NATS server)")
	tlsCA := fs.String("tls-ca", "", "CA bundle `file` (path on the NATS server), optional")
	out := fs.String("out", "", "output `directory` for nats-server.conf and the seed files (required)")
	force := fs.Bool("force", false, "replace existing seed files with new keys (every service then needs its new seed file)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: alpctl nats-config --tenants a.org[,b.org] --out DIR [flags]")
		fmt.Fprintln(stderr, "Writes DIR/nats-server.conf and one nkey seed file per service role (DIR/<role>.nk;")
		fmt.Fprintln(stderr, "hard isolation: DIR/<tenant>/<role>.nk). See docs/nats-permissions.md.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "alpctl nats-config: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q (all settings are flags)", fs.Arg(0))
	}
	if *out == "" {
		return usageErr("--out DIR is required")
	}
	if strings.TrimSpace(*tenants) == "" {
		return usageErr("--tenants is required (comma-separated domains)")
	}
	o := natsauth.ServerOptions{
		Listen: *listen, StoreDir: *storeDir, Isolation: natsauth.Isolation(*isolation), BrokerName: *brokerName,
		TLS: natsauth.TLS{CertFile: *tlsCert, KeyFile: *tlsKey, CAFile: *tlsCA},
	}
	for item := range strings.SplitSeq(*tenants, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		domain, name, named := strings.Cut(item, "=")
		if named {
			if o.Isolation != natsauth.Hard {
				return usageErr("--tenants %q: a tenant's own broker name (domain=name) needs --isolation hard", item)
			}
			if o.Brokers == nil {
				o.Brokers = map[string]string{}
			}
			o.Brokers[domain] = name
		}
		o.Tenants = append(o.Tenants, domain)
	}
	if o.Isolation == natsauth.Shared && o.BrokerName == "" {
		o.BrokerName = "alpd"
	}
	users, err := o.Users()
	if err != nil {
		return usageErr("%s", strings.ReplaceAll(err.Error(), "natsauth: ", ""))
	}

	var existing []string
	for _, u := range users {
		path := filepath.Join(*out, u.SeedFile())
		if _, err := os.Lstat(path); err == nil {
			existing = append(existing, path)
		} else if !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "alpctl nats-config: %v\n", err)
			return 1
		}
	}
	if len(existing) > 0 && !*force {
		fmt.Fprintf(stderr, "alpctl nats-config: seed files exist and are the services' NATS credentials: %s\n", strings.Join(existing, ", "))
		fmt.Fprintln(stderr, "Nothing was written. Use --force to replace every seed with a new key (then give each service its new file).")
		return 1
	}

	o.PublicKeys = map[string]string{}
	files := map[string][]byte{}
	var order []string
	for _, u := range users {
		seed, pub, err := natsauth.NewUserKey()
		if err != nil {
			fmt.Fprintf(stderr, "alpctl nats-config: %v\n", err)
			return 1
		}
		o.PublicKeys[u.ID()] = pub
		path := filepath.Join(*out, u.SeedFile())
		files[path] = seed
		order = append(order, path)
	}
	conf, err := natsauth.ServerConfig(o)
	if err != nil {
		fmt.Fprintf(stderr, "alpctl nats-config: %v\n", err)
		return 1
	}
	confPath := filepath.Join(*out, "nats-server.conf")
	files[confPath] = []byte(conf)
	order = append(order, confPath)
	if err := writeAll(files, order); err != nil {
		fmt.Fprintf(stderr, "alpctl nats-config: %v\n", err)
		return 1
	}

	fmt.Fprintf(stdout, "wrote %s (isolation %s, listen %s)\n", confPath, o.Isolation, o.Listen)
	for _, u := range users {
		fmt.Fprintf(stdout, "wrote %s  user %s  account %s  broker %s  inbox %s\n",
			filepath.Join(*out, u.SeedFile()), o.PublicKeys[u.ID()], u.Account, u.Broker, u.InboxPrefix())
	}
	fmt.Fprintln(stdout, "Give each service's process only its own seed file (nats.nkey_seed_file), and set its broker.name to its broker.")
	return 0
}

// writeAll writes every file (0600) under a temporary name first, then
// renames them into place, so a failure leaves no half-written set.
func writeAll(files map[string][]byte, order []string) error {
	tmps := map[string]string{}
	cleanup := func() {
		for _, tmp := range tmps {
			_ = os.Remove(tmp)
		}
	}
	for _, path := range order {
		dir := filepath.Dir(path)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			cleanup()
			return err
		}
		f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
		if err != nil {
			cleanup()
			return err
		}
		tmps[path] = f.Name()
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			cleanup()
			return err
		}
		_, err = f.Write(files[path])
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			cleanup()
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	for _, path := range order {
		if err := os.Rename(tmps[path], path); err != nil {
			cleanup()
			return err
		}
		delete(tmps, path)
	}
	return nil
}
