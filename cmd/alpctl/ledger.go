package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/alpd-project/alpd/internal/ledgerlog"
)

// Exit codes of the ledger commands: 0 verified/matched, 1 failed (the
// ledger does not verify, the ledgers do not match, or an export is
// unreadable), 2 usage or local errors (bad flags, unreadable state).
const (
	exitFailed = 1
	exitUsage  = 2
)

const ledgerUsage = `usage:
  alpctl ledger verify FILE [--since CHECKPOINT_FILE] [--state FILE | --no-state] [--peer EXPORT]... [--peer-key VKEY]... [--keys FILE]...
  alpctl ledger match A B`

func ledgerCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, ledgerUsage)
		return exitUsage
	}
	switch args[0] {
	case "verify":
		return ledgerVerifyCmd(args[1:], stdout, stderr)
	case "match":
		return ledgerMatchCmd(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "alpctl ledger: unknown command %q\n%s\n", args[0], ledgerUsage)
	return exitUsage
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// parseInterleaved parses flags that may come before or after positional
// arguments ("verify FILE --since X"), which package flag alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func readExportFile(path string) (*ledgerlog.Export, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	x, err := ledgerlog.ReadExport(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return x, nil
}

func ledgerVerifyCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ledger verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sinceFile := fs.String("since", "", "a checkpoint you hold (signed-note or body text); consistency is demanded from it instead of the remembered one")
	statePath := fs.String("state", defaultLedgerStatePath(), "file where alpctl remembers the last checkpoint verified per ledger")
	noState := fs.Bool("no-state", false, "neither read nor update the state file")
	var peers, peerKeys listFlag
	fs.Var(&peers, "peer", "a counterparty's export, whose keys verify the receipts it issued (repeatable)")
	fs.Var(&peerKeys, "peer-key", "a counterparty's signed-note verifier key, or a cosigner's key (repeatable)")
	var keyFiles listFlag
	fs.Var(&keyFiles, "keys", "a file of counterparties' verifier keys (one per line), or an alp-wire/v1 BrokerKeys document whose ledger_keys are used (repeatable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, ledgerUsage)
		return exitUsage
	}
	x, err := readExportFile(pos[0])
	if err != nil {
		fmt.Fprintln(stderr, "alpctl: ledger does not verify:", err)
		return exitFailed
	}
	for _, f := range keyFiles {
		ks, err := readKeysFile(f)
		if err != nil {
			fmt.Fprintln(stderr, "alpctl: --keys:", err)
			return exitUsage
		}
		peerKeys = append(peerKeys, ks...)
	}
	opts := keyOptions(peerKeys)
	for _, p := range peers {
		px, err := readExportFile(p)
		if err != nil {
			fmt.Fprintln(stderr, "alpctl: --peer:", err)
			return exitUsage
		}
		opts = append(opts, ledgerlog.WithCounterpartyExport(px))
	}

	var st *ledgerState
	var remembered *ledgerlog.Checkpoint
	if !*noState {
		if *statePath == "" {
			fmt.Fprintln(stderr, "alpctl: no home directory for the state file; use --state or --no-state")
			return exitUsage
		}
		if st, err = loadLedgerState(*statePath); err == nil {
			remembered, err = st.checkpoint(x.Log)
		}
		if err != nil {
			fmt.Fprintln(stderr, "alpctl:", err)
			return exitUsage
		}
	}
	since, sinceWhat := remembered, "the checkpoint remembered in "+*statePath
	if *sinceFile != "" {
		data, err := os.ReadFile(*sinceFile)
		if err != nil {
			fmt.Fprintln(stderr, "alpctl: --since:", err)
			return exitUsage
		}
		cp, err := ledgerlog.CheckpointText(data)
		if err != nil {
			fmt.Fprintf(stderr, "alpctl: --since %s: %v\n", *sinceFile, err)
			return exitUsage
		}
		since, sinceWhat = &cp, *sinceFile
	}

	r, verr := ledgerlog.Verify(x, since, opts...)
	printVerifyReport(stdout, x, r, sinceWhat)
	if verr != nil {
		fmt.Fprintf(stdout, "\nFAILED: %d problem(s)\n", len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintln(stdout, "  "+p.Error())
		}
		return exitFailed
	}
	fmt.Fprintln(stdout, "\nVERIFIED")
	if st != nil {
		rememberCheckpoint(st, *statePath, x, r, remembered, since, stdout, stderr)
	}
	return 0
}

// rememberCheckpoint replaces the remembered checkpoint by the verified one
// when it extends it. A checkpoint verified against --since only replaces
// the remembered one if it is also consistent with it: the state never
// forgets evidence.
func rememberCheckpoint(st *ledgerState, path string, x *ledgerlog.Export, r *ledgerlog.Report, remembered, since *ledgerlog.Checkpoint, stdout, stderr io.Writer) {
	cp := r.Checkpoint
	if remembered != nil {
		if *remembered == cp {
			return
		}
		if since != remembered {
			if err := ledgerlog.ConsistentWith(x, *remembered); err != nil || cp.Size < remembered.Size {
				fmt.Fprintf(stderr, "alpctl: WARNING: not remembering size %d: it does not extend the checkpoint remembered in %s (size %d): %v\n",
					cp.Size, path, remembered.Size, err)
				return
			}
		}
	}
	st.remember(cp, x.Checkpoint, time.Now())
	if err := st.save(path); err != nil {
		fmt.Fprintln(stderr, "alpctl: WARNING:", err)
		return
	}
	fmt.Fprintf(stdout, "remembered checkpoint size %d of %s in %s\n", cp.Size, cp.Origin, path)
}

func printVerifyReport(w io.Writer, x *ledgerlog.Export, r *ledgerlog.Report, sinceWhat string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ledger\t%s\n", r.Log)
	keys := make([]string, 0, len(x.Keys))
	for _, k := range x.Keys {
		keys = append(keys, k.KeyID)
	}
	fmt.Fprintf(tw, "keys\t%s\n", strings.Join(keys, ", "))
	if r.CheckpointOK {
		fmt.Fprintf(tw, "checkpoint\tsize %d, root %s, signature ok\n", r.Checkpoint.Size, base64.StdEncoding.EncodeToString(r.Checkpoint.Root[:]))
	} else {
		fmt.Fprintf(tw, "checkpoint\tNOT VERIFIED\n")
	}
	fmt.Fprintf(tw, "entries\t%d (%d beyond the checkpoint, not yet signed)\n", r.Entries, r.Unsigned)
	tree := "root recomputed from the leaves matches"
	if !r.RootOK {
		tree = "DOES NOT MATCH the checkpoint"
	}
	fmt.Fprintf(tw, "tree\t%s\n", tree)
	fmt.Fprintf(tw, "openings\t%d checked, %d erased\n", r.Openings, r.Erased)
	switch {
	case r.Since == nil:
		fmt.Fprintf(tw, "consistency\tno earlier checkpoint held: first verification of this ledger\n")
	case r.Consistent:
		fmt.Fprintf(tw, "consistency\textends size %d from %s\n", r.Since.Size, sinceWhat)
	default:
		fmt.Fprintf(tw, "consistency\tFAILED against size %d from %s\n", r.Since.Size, sinceWhat)
	}
	counts := map[string]int{}
	for _, rc := range r.Receipts {
		counts[rc.Status]++
	}
	var parts []string
	for _, s := range []string{ledgerlog.ReceiptVerified, ledgerlog.ReceiptInvalid} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	for _, rc := range r.Receipts {
		if strings.HasPrefix(rc.Status, "unverified") {
			parts = append(parts, fmt.Sprintf("entry %d %s", rc.Index, rc.Status))
		}
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	fmt.Fprintf(tw, "receipts\t%s\n", strings.Join(parts, "; "))
	fmt.Fprintf(tw, "cosigned\t%s\n", cosignatureSummary(r))
	tw.Flush()
}

// cosignatureSummary is one line about the ledger's recorded cosignatures:
// each cosigner, the checkpoint size it cosigned and whether it verified.
func cosignatureSummary(r *ledgerlog.Report) string {
	if len(r.Cosignatures) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(r.Cosignatures))
	for _, c := range r.Cosignatures {
		parts = append(parts, fmt.Sprintf("entry %d by %s of size %d at %s: %s", c.Index, c.Cosigner, c.Size,
			time.Unix(int64(min(c.Time, 1<<40)), 0).UTC().Format(time.RFC3339), c.Status))
	}
	return strings.Join(parts, "; ")
}

// keyOptions sorts keys into the counterparties' ledger keys (receipts;
// their cosigner keys follow from them) and cosigner keys.
func keyOptions(vkeys []string) []ledgerlog.VerifyOption {
	var ledger, cosigners []string
	for _, k := range vkeys {
		if _, _, err := ledgerlog.ParseCosignerKey(k); err == nil {
			cosigners = append(cosigners, k)
		} else {
			ledger = append(ledger, k)
		}
	}
	return []ledgerlog.VerifyOption{ledgerlog.WithCounterpartyKeys(ledger...), ledgerlog.WithCosignerKeys(cosigners...)}
}

// maxKeysFile bounds a keys file: a BrokerKeys document is at most 64 KiB
// (what discovery reads), a list of keys far less.
const maxKeysFile = 64 << 10

// readKeysFile reads verifier keys: one per line (blank lines and # comments
// skipped), or, for a JSON file, the ledger_keys of an alp-wire/v1
// BrokerKeys document (every domain's). The document's own signature is not
// checked here: the file is the keys you chose to trust, however you got them.
func readKeysFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeysFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeysFile {
		return nil, fmt.Errorf("%s: more than %d bytes", path, maxKeysFile)
	}
	if t := strings.TrimSpace(string(data)); strings.HasPrefix(t, "{") {
		var doc struct {
			Wire       string              `json:"wire"`
			LedgerKeys map[string][]string `json:"ledger_keys"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s: not a BrokerKeys document: %w", path, err)
		}
		if doc.Wire != "alp-wire/v1" {
			return nil, fmt.Errorf("%s: wire %q, want alp-wire/v1", path, doc.Wire)
		}
		var keys []string
		for _, ks := range doc.LedgerKeys {
			keys = append(keys, ks...)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("%s: the document lists no ledger_keys", path)
		}
		return keys, nil
	}
	var keys []string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := note.NewVerifier(line); err != nil {
			if _, _, cerr := ledgerlog.ParseCosignerKey(line); cerr != nil {
				return nil, fmt.Errorf("%s:%d: not a ledger or cosigner verifier key (<name>+<key id>+<base64 key>): %v", path, n+1, err)
			}
		}
		keys = append(keys, line)
	}
	return keys, nil
}

func ledgerMatchCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ledger match", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 {
		fmt.Fprintln(stderr, ledgerUsage)
		return exitUsage
	}
	var xs [2]*ledgerlog.Export
	for i, p := range pos {
		if xs[i], err = readExportFile(p); err != nil {
			fmt.Fprintln(stderr, "alpctl: ledgers do not match:", err)
			return exitFailed
		}
	}
	m := ledgerlog.Match(xs[0], xs[1])
	for i, r := range []*ledgerlog.Report{m.A, m.B} {
		state := "verified"
		if err := r.Err(); err != nil {
			var ve *ledgerlog.VerifyError
			if errors.As(err, &ve) {
				state = fmt.Sprintf("DOES NOT VERIFY (%d problems, first: %s)", len(ve.Problems), ve.Problems[0].Error())
			}
		}
		fmt.Fprintf(stdout, "%c: %s — %d entries, checkpoint size %d, %s; cosignatures: %s\n", 'A'+i, r.Log, r.Entries, r.Checkpoint.Size, state, cosignatureSummary(r))
	}
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENVELOPE\tA\tB\tSTATUS\tPROBLEMS")
	for _, row := range m.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", row.EnvelopeID, idx(row.AIndex), idx(row.BIndex), row.Status, strings.Join(row.Problems, "; "))
	}
	tw.Flush()
	if m.Unrelated > 0 {
		fmt.Fprintf(stdout, "(%d envelopes in only one ledger do not involve the other and were not compared)\n", m.Unrelated)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, m.Verdict())
	if !m.OK() {
		return exitFailed
	}
	return 0
}

func idx(i int64) string {
	if i < 0 {
		return "-"
	}
	return fmt.Sprint(i)
}
