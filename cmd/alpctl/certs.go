package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/mtls"
)

// certsCmd writes a development CA and a certificate per role, for the mTLS
// between alpd's services in split mode:
//
//	alpctl certs --out DIR [--hosts 127.0.0.1,localhost] [--days 30] [--roles all|ingress,policy,...] [--force]
//
// Production takes its certificates from the organisation's CA instead (see
// internal/mtls).
func certsCmd(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("certs", flag.ContinueOnError)
	flags.SetOutput(stderr)
	out := flags.String("out", "", "directory to write ca.pem, ca-key.pem, <role>.pem and <role>-key.pem into (required)")
	hosts := flags.String("hosts", "127.0.0.1,localhost", "comma-separated DNS names and IP addresses every certificate names")
	days := flags.Int("days", 30, "validity of the role certificates, in days")
	caDays := flags.Int("ca-days", 3650, "validity of a new CA, in days (an existing CA in --out is reused as it is)")
	rolesFlag := flags.String("roles", "all", "comma-separated roles to issue certificates for ("+strings.Join(certsRoleNames(), ", ")+"), or all")
	force := flags.Bool("force", false, "replace existing role certificates and keys")
	natsServer := flags.Bool("nats-server", false, "also issue nats-server.pem and nats-server-key.pem (server-only, for nats-server's TLS)")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: alpctl certs --out DIR [--hosts 127.0.0.1,localhost] [--days 30] [--roles all|ingress,policy,...] [--force]")
		fmt.Fprintln(stderr, "\nWrites a development CA and one mTLS certificate per service role (URI SAN spiffe://alpd/role/<role>).")
		fmt.Fprintln(stderr, "Not for production: there, certificates come from your organisation's CA (cert-manager in Kubernetes).")
		fmt.Fprintln(stderr)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(stderr, "alpctl certs: unexpected argument %q\n", flags.Arg(0))
		flags.Usage()
		return 2
	}
	if *out == "" {
		fmt.Fprintln(stderr, "alpctl certs: --out DIR is required")
		flags.Usage()
		return 2
	}
	if *days <= 0 {
		fmt.Fprintf(stderr, "alpctl certs: --days must be positive, not %d\n", *days)
		return 2
	}
	if *caDays <= 0 {
		fmt.Fprintf(stderr, "alpctl certs: --ca-days must be positive, not %d\n", *caDays)
		return 2
	}
	roles, err := certsParseRoles(*rolesFlag)
	if err != nil {
		fmt.Fprintln(stderr, "alpctl certs:", err)
		return 2
	}
	var hostList []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hostList = append(hostList, h)
		}
	}
	day := 24 * time.Hour
	res, err := mtls.WriteDevCerts(*out, mtls.DevOptions{
		Roles:      roles,
		Hosts:      hostList,
		Validity:   time.Duration(*days) * day,
		CAValidity: time.Duration(*caDays) * day,
		Force:      *force,
		NATSServer: *natsServer,
	})
	if res != nil {
		for _, f := range res.Written {
			fmt.Fprintln(stdout, "wrote", f)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "alpctl certs:", err)
		if errors.Is(err, fs.ErrExist) {
			fmt.Fprintln(stderr, "alpctl certs: nothing was written; pass --force to replace them")
		}
		return 1
	}
	if res.CAReused {
		fmt.Fprintln(stdout, "issued by the existing CA", res.CAFile)
	}
	fmt.Fprintf(stdout, "development certificates for %s, valid %d days, for %s\n", strings.Join(certsNames(roles), ", "), *days, strings.Join(hostList, ", "))
	return 0
}

func certsParseRoles(s string) ([]alpv1.Role, error) {
	var roles []alpv1.Role
	for _, n := range strings.Split(s, ",") {
		n = strings.ToLower(strings.TrimSpace(n))
		switch n {
		case "":
			continue
		case "all":
			roles = append(roles, mtls.Roles()...)
			continue
		}
		r, ok := mtls.RoleByName(n)
		if !ok {
			return nil, fmt.Errorf("unknown role %q in --roles (known: %s, or all)", n, strings.Join(certsRoleNames(), ", "))
		}
		roles = append(roles, r)
	}
	if len(roles) == 0 {
		return nil, errors.New("--roles names no role")
	}
	return roles, nil
}

func certsRoleNames() []string { return certsNames(mtls.Roles()) }

func certsNames(roles []alpv1.Role) []string {
	var out []string
	seen := map[alpv1.Role]bool{}
	for _, r := range roles {
		if !seen[r] {
			seen[r] = true
			out = append(out, mtls.RoleName(r))
		}
	}
	return out
}
