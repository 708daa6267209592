package federation_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
	"github.com/alpd-project/alpd/internal/alpwire"
	"github.com/alpd-project/alpd/internal/keystore"
	"github.com/alpd-project/alpd/internal/ledgerlog"
	"github.com/alpd-project/alpd/internal/testkit"
	"github.com/alpd-project/alpd/services/federation/discovery"
	"github.com/alpd-project/alpd/services/ledger/receipts"
	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

// TestCosignedCheckpoints: after ana@a.example and lee@b.example exchange
// messages, each broker has had its person's log witnessed by the other's
// (POST /federation/v1/cosign). ana's exported ledger, verified by alpctl
// with b.example's published keys document, reports b.example's witness
// cosignatures of her checkpoints, verified; lee's, with a.example's,
// reports a.example's; and alpctl ledger match of the two exports matches
// every envelope between them.
func TestCosignedCheckpoints(t *testing.T) {
	h := New(t, BrokerSpec{Name: "broker.a.example", Domains: []string{"a.example"}, Users: []string{"ana"}},
		BrokerSpec{Name: "broker.b.example", Domains: []string{"b.example"}, Users: []string{"lee"}})
	a, b := h.Broker("broker.a.example"), h.Broker("broker.b.example")
	anaTok, ana := a.PAT(t, "a.example", "ana", "desk", "alp.send", "alp.read")
	leeTok, lee := b.PAT(t, "b.example", "lee", "muse", "alp.send", "alp.read")

	connect(t, h, a, anaTok, ana, lee)
	lee.OptInFreeText(t)
	ana.OptInFreeText(t)
	there := h.send(t, a, anaTok, "lee@b.example", "note/v1", map[string]any{"text": "Lunch on Friday?"})
	h.waitDelivery(t, a, anaTok, there, "delivered")
	back := h.send(t, b, leeTok, "ana@a.example", "note/v1", map[string]any{"text": "Friday it is."})
	h.waitDelivery(t, b, leeTok, back, "delivered")

	dir := t.TempDir()
	keysA, keysB := filepath.Join(dir, "a-broker.json"), filepath.Join(dir, "b-broker.json")
	for path, br := range map[string]*Broker{keysA: a, keysB: b} {
		status, doc := br.Get(t, "/.well-known/alp/broker")
		if status != http.StatusOK {
			t.Fatalf("GET %s/.well-known/alp/broker: %d %s", br.URL, status, doc)
		}
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	anaFile, leeFile := filepath.Join(dir, "ana.jsonl"), filepath.Join(dir, "lee.jsonl")

	// Cosignatures are recorded after the exchange, asynchronously (the
	// outbox): wait until both exports show them and match.
	var last string
	testkit.Eventually(t, 60*time.Second, func() error {
		h.export(t, a, anaTok, anaFile)
		h.export(t, b, leeTok, leeFile)
		for _, c := range []struct {
			file, keys, witness string
		}{{anaFile, keysB, "b.example/alp/witness"}, {leeFile, keysA, "a.example/alp/witness"}} {
			out, err := h.alpctl(t, "ledger", "verify", c.file, "--no-state", "--keys", c.keys)
			last = out
			if err != nil {
				return fmt.Errorf("alpctl ledger verify %s: %v", filepath.Base(c.file), err)
			}
			if err := cosignedBy(out, c.witness); err != nil {
				return fmt.Errorf("alpctl ledger verify %s: %v", filepath.Base(c.file), err)
			}
		}
		out, err := h.alpctl(t, "ledger", "match", anaFile, leeFile)
		last = out
		if err != nil {
			return fmt.Errorf("alpctl ledger match: %v\n%s", err, out)
		}
		if !regexp.MustCompile(`both ledgers verified, and all [0-9]+ envelopes matched across them`).MatchString(out) {
			return errors.New("alpctl ledger match did not match every envelope")
		}
		for _, id := range []string{there, back} {
			if !regexp.MustCompile(regexp.QuoteMeta(id) + `\s+\d+\s+\d+\s+matched`).MatchString(out) {
				return fmt.Errorf("alpctl ledger match did not match envelope %s", id)
			}
		}
		return nil
	}, "both ledgers cosigned by the other broker, and matched")
	t.Logf("alpctl ledger match:\n%s", last)

	witnessChecks(t, h, a, b, anaTok, anaFile, keysB)
}

// cosignedBy checks alpctl ledger verify's report: VERIFIED, and a cosigned
// line listing cosignatures by witness, every one verified.
func cosignedBy(out, witness string) error {
	if !strings.Contains(out, "\nVERIFIED\n") {
		return fmt.Errorf("not VERIFIED:\n%s", out)
	}
	var line string
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, "cosigned") {
			line = l
		}
	}
	parts := strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cosigned")), "; ")
	if line == "" || parts[0] == "none" {
		return fmt.Errorf("no cosignatures:\n%s", out)
	}
	for _, p := range parts {
		if !strings.Contains(p, " by "+witness+" ") || !strings.HasSuffix(p, ": verified") {
			return fmt.Errorf("cosignature %q is not one by %s, verified:\n%s", p, witness, out)
		}
	}
	return nil
}

// export saves the person's ledger export (GET /v1/ledger/export with their
// agent's token) to path.
func (h *Harness) export(t testing.TB, b *Broker, token, path string) {
	t.Helper()
	status, raw := h.agentDo(t, b, http.MethodGet, "/v1/ledger/export", token, nil)
	if status != http.StatusOK {
		t.Fatalf("GET /v1/ledger/export: %d %s", status, raw)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// alpctl runs alpctl with args and returns its output; a non-zero exit is
// the error.
func (h *Harness) alpctl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(h.Bins.ALPCTL, args...)
	cmd.Env = alpdtest.HermeticEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("alpctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), err
}

// witnessChecks: b.example's witness, asked directly. From a size it does
// not hold it answers 409 witness_size_mismatch with the size it holds
// (Alp-Witness-Size), and with the proof from there it cosigns (the line
// verifies with b.example's published ledger key); a checkpoint signed by
// a.example's real ledger key with another root at the size it holds is a
// split view; a request signed by a broker that is not a.example's home
// broker is refused. The outbox may cosign ana's log meanwhile, which moves
// the size the witness holds: each step follows it.
func witnessChecks(t *testing.T, h *Harness, a, b *Broker, anaTok, anaFile, keysB string) {
	ctx := context.Background()
	ksA := a.KeyStore(t)
	fedA := fedSigner(t, ksA, a.Name)
	doc, err := os.ReadFile(keysB)
	if err != nil {
		t.Fatal(err)
	}
	bk, err := alpwire.ParseBrokerKeys(doc)
	if err != nil {
		t.Fatal(err)
	}
	var cosigners []string
	for _, k := range bk.LedgerKeys["b.example"] {
		c, err := ledgerlog.CosignerKeyOf(k)
		if err != nil {
			t.Fatal(err)
		}
		cosigners = append(cosigners, c)
	}

	var held uint64
	var cp ledgerlog.Checkpoint
	cosigned := false
	for round := 0; round < 6 && !cosigned; round++ {
		h.export(t, a, anaTok, anaFile)
		x := readExport(t, anaFile)
		if cp, err = ledgerlog.CheckpointText(x.Checkpoint); err != nil {
			t.Fatal(err)
		}
		if held > cp.Size {
			continue // the witness holds a newer checkpoint than this export's
		}
		tree := ledgerlog.NewMemoryTree(0)
		for _, e := range x.Entries[:cp.Size] {
			if _, err := tree.AppendHash(e.LeafHash); err != nil {
				t.Fatal(err)
			}
		}
		var proof [][]byte
		if held > 0 && held < cp.Size {
			p, err := tree.ConsistencyProof(held, cp.Size)
			if err != nil {
				t.Fatal(err)
			}
			for _, hh := range p {
				proof = append(proof, hh[:])
			}
		}
		status, header, body := cosignRequest(t, h, b, a.Name, fedA, &alpwire.CosignRequest{Origin: a.Name, Witness: "b.example", Log: x.Log,
			OldSize: int64(held), ConsistencyProof: alpwire.EncodeProof(proof), Checkpoint: string(x.Checkpoint)})
		switch {
		case status == http.StatusConflict && problemCode(body) == alpwire.CodeWitnessSizeMismatch:
			n, err := strconv.ParseUint(header.Get(alpwire.HeaderWitnessSize), 10, 64)
			if err != nil || n == held || n == 0 {
				t.Fatalf("size mismatch from %d names the size %q: %s", held, header.Get(alpwire.HeaderWitnessSize), body)
			}
			held = n
		case status == http.StatusOK:
			c, err := alpwire.ParseCosigned(body)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ledgerlog.VerifyCosignature(c.Cosignature, cp, cosigners...); err != nil || uint64(c.Size) != cp.Size {
				t.Fatalf("the witness's answer %s does not verify for %s: %v", body, cp, err)
			}
			if held == 0 {
				t.Fatal("the witness cosigned from size 0 a log it had cosigned before")
			}
			cosigned, held = true, cp.Size
		default:
			t.Fatalf("cosign from %d: %d %s", held, status, body)
		}
	}
	if !cosigned {
		t.Fatal("the witness never cosigned")
	}

	// Another root at the size it holds, signed by a.example's own key.
	ledgerKey, err := (&receipts.Issuer{Keys: ksA}).Signer(ctx, "a.example")
	if err != nil {
		t.Fatal(err)
	}
	ns, err := ledgerlog.NoteSigner("a.example", ledgerKey)
	if err != nil {
		t.Fatal(err)
	}
	split := false
	for round := 0; round < 4 && !split; round++ {
		forged, err := ledgerlog.SignCheckpoint(ledgerlog.Checkpoint{Origin: cp.Origin, Size: held, Root: tlog.Hash{1, 2, 3}}, ns)
		if err != nil {
			t.Fatal(err)
		}
		status, header, body := cosignRequest(t, h, b, a.Name, fedA, &alpwire.CosignRequest{Origin: a.Name, Witness: "b.example", Log: cp.Origin,
			OldSize: int64(held), Checkpoint: string(forged)})
		switch {
		case status == http.StatusConflict && problemCode(body) == alpwire.CodeSplitView:
			split = true
		case status == http.StatusConflict && problemCode(body) == alpwire.CodeWitnessSizeMismatch:
			held, _ = strconv.ParseUint(header.Get(alpwire.HeaderWitnessSize), 10, 64)
		default:
			t.Fatalf("a forged checkpoint of size %d: %d %s, want 409 %s", held, status, body, alpwire.CodeSplitView)
		}
	}
	if !split {
		t.Fatal("the forged checkpoint was never refused as a split view")
	}

	// broker.b.example is not a.example's home broker.
	fedB := fedSigner(t, b.KeyStore(t), b.Name)
	status, _, body := cosignRequest(t, h, b, b.Name, fedB, &alpwire.CosignRequest{Origin: b.Name, Witness: "b.example", Log: cp.Origin,
		OldSize: 0, Checkpoint: string(readExport(t, anaFile).Checkpoint)})
	if status != http.StatusForbidden || problemCode(body) != "signer_not_home_broker" {
		t.Fatalf("a cosign request for a.example's log signed by %s: %d %s, want 403 signer_not_home_broker", b.Name, status, body)
	}
}

// brokerSigner is a broker's active federation key, from its key file.
type brokerSigner struct {
	keyID  string
	signer crypto.Signer
}

func fedSigner(t testing.TB, ks keystore.KeyStore, broker string) brokerSigner {
	t.Helper()
	ctx := context.Background()
	info, err := discovery.BrokerKey(ctx, ks, broker)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ks.Signer(ctx, broker, alpv1.KeyPurpose_KEY_PURPOSE_FEDERATION, info.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	return brokerSigner{keyID: alpwire.KeyID(s.Public().(ed25519.PublicKey)), signer: s}
}

// cosignRequest signs r as origin and POSTs it to b's /federation/v1/cosign
// with the signed Authorization header.
func cosignRequest(t testing.TB, h *Harness, b *Broker, origin string, k brokerSigner, r *alpwire.CosignRequest) (int, http.Header, []byte) {
	t.Helper()
	r.RequestedTS = time.Now().UnixMilli()
	raw, err := alpwire.SignCosignRequest(r, k.keyID, k.signer)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/federation/v1/cosign", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if err := alpwire.SignRequest(req, raw, origin, b.Name, k.keyID, k.signer, time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := h.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

func problemCode(body []byte) string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Code
}

func readExport(t testing.TB, path string) *ledgerlog.Export {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	x, err := ledgerlog.ReadExport(f)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
