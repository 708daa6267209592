package alpwire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The golden vectors of spec/vectors/wire drive these tests: every valid
// case is signed again from its input and must reproduce the file's bytes,
// signing input and signature exactly; every invalid case must be refused
// with the file's code and pointer. `go test -run TestVectors -update`
// rewrites the outputs of the valid cases (never the invalid cases'
// expectations, which are written by hand).

var update = flag.Bool("update", false, "rewrite the outputs of the valid wire vectors")

const vectorDir = "../../spec/vectors/wire"

type vectorKey struct {
	Seed   string `json:"seed_hex"`
	Broker string `json:"broker"`
	KeyID  string `json:"key_id"`
	Public string `json:"public"`
}

type vectorFile struct {
	Description string        `json:"description"`
	Valid       []validCase   `json:"valid"`
	Invalid     []invalidCase `json:"invalid"`
}

type validCase struct {
	Name   string          `json:"name"`
	Kind   string          `json:"kind"`
	Signer string          `json:"signer,omitempty"`
	Input  json.RawMessage `json:"input"`
	// outputs
	SigningInput  string `json:"signing_input,omitempty"`
	Signature     string `json:"signature,omitempty"`
	Bytes         string `json:"bytes,omitempty"`
	Authorization string `json:"authorization,omitempty"`
}

type invalidCase struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Raw     string `json:"raw,omitempty"`
	RawB64  string `json:"raw_b64,omitempty"`
	PadTo   int    `json:"pad_to,omitempty"`
	Verify  bool   `json:"verify,omitempty"`
	Code    string `json:"code"`
	Pointer string `json:"pointer"`
}

// requestInput is a request vector's input.
type requestInput struct {
	Method      string `json:"method"`
	URI         string `json:"uri"`
	Body        string `json:"body"`
	Origin      string `json:"origin"`
	Destination string `json:"destination"`
	TS          int64  `json:"ts"`
	Nonce       string `json:"nonce"` // base64url of 16 bytes
}

// vectorNow is the verification time of every vector (2025-01-01T00:00:00Z),
// inside every request vector's skew.
const vectorNow = 1735689600000

func loadKeys(t *testing.T) map[string]vectorKey {
	t.Helper()
	var f struct {
		Keys map[string]vectorKey `json:"keys"`
	}
	b, err := os.ReadFile(filepath.Join(vectorDir, "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	for name, k := range f.Keys {
		priv := k.private(t)
		pub := priv.Public().(ed25519.PublicKey)
		if KeyID(pub) != k.KeyID || b64url.EncodeToString(pub) != k.Public {
			t.Errorf("keys.json %s: key_id/public are %s %s, want %s %s", name, k.KeyID, k.Public, KeyID(pub), b64url.EncodeToString(pub))
		}
	}
	return f.Keys
}

func (k vectorKey) private(t *testing.T) ed25519.PrivateKey {
	seed, err := hex.DecodeString(k.Seed)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("bad seed %q", k.Seed)
	}
	return ed25519.NewKeyFromSeed(seed)
}

// resolver knows every key of keys.json as a current key of its broker.
func resolver(keys map[string]vectorKey) KeyResolver {
	return func(broker, keyID string, _ time.Time) (ed25519.PublicKey, error) {
		for _, k := range keys {
			if k.Broker == broker && k.KeyID == keyID {
				pub, _ := b64url.DecodeString(k.Public)
				return pub, nil
			}
		}
		return nil, newErr(CodeUnknownKey, "", "no vector key "+keyID+" of "+broker)
	}
}

func TestVectors(t *testing.T) {
	keys := loadKeys(t)
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, path := range files {
		if filepath.Base(path) == "keys.json" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f vectorFile
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for i := range f.Valid {
			c := &f.Valid[i]
			t.Run(filepath.Base(path)+"/valid/"+c.Name, func(t *testing.T) { runValid(t, c, keys) })
			ran++
		}
		for _, c := range f.Invalid {
			t.Run(filepath.Base(path)+"/invalid/"+c.Name, func(t *testing.T) { runInvalid(t, c, keys) })
			ran++
		}
		if *update {
			out, err := json.MarshalIndent(f, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, append(out, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if ran < 60 {
		t.Fatalf("only %d vector cases ran", ran)
	}
}

func runValid(t *testing.T, c *validCase, keys map[string]vectorKey) {
	k, ok := keys[c.Signer]
	if c.Kind != "domain_doc" && c.Kind != "cosigned" && !ok {
		t.Fatalf("no signer %q", c.Signer)
	}
	var (
		raw     []byte
		err     error
		context string
		broker  = k.Broker
	)
	switch c.Kind {
	case "envelope":
		var e Envelope
		mustStrict(t, c.Input, &e)
		raw, err = SignEnvelope(&e, k.Broker, k.KeyID, k.private(t))
		context = CtxEnvelope
	case "broker_keys":
		var b BrokerKeys
		mustStrict(t, c.Input, &b)
		raw, err = SignBrokerKeys(&b, k.KeyID, k.private(t))
		context = CtxBrokerKeys
	case "accepted":
		var a Accepted
		mustStrict(t, c.Input, &a)
		raw, err = SignAccepted(&a, k.KeyID, k.private(t))
		context = CtxAccepted
	case "receipt_notice":
		var n ReceiptNotice
		mustStrict(t, c.Input, &n)
		raw, err = SignReceiptNotice(&n, k.KeyID, k.private(t))
		context = CtxReceipt
	case "cosign_request":
		var r CosignRequest
		mustStrict(t, c.Input, &r)
		raw, err = SignCosignRequest(&r, k.KeyID, k.private(t))
		context = CtxCosign
	case "cosigned":
		// Not signed by a broker: the cosignature line is the signature.
		var a Cosigned
		mustStrict(t, c.Input, &a)
		raw, err := MarshalCosigned(&a)
		if err != nil {
			t.Fatalf("MarshalCosigned: %v", err)
		}
		if *update {
			c.Bytes = string(raw)
		}
		if string(raw) != c.Bytes {
			t.Errorf("bytes\n got %s\nwant %s", raw, c.Bytes)
		}
		if err := parseKind(c.Kind, []byte(c.Bytes)); err != nil {
			t.Errorf("parse file bytes: %v", err)
		}
		return
	case "domain_doc":
		if _, err := ParseDomainDoc(c.Input); err != nil {
			t.Fatalf("ParseDomainDoc: %v", err)
		}
		return
	case "request":
		runValidRequest(t, c, k, keys)
		return
	default:
		t.Fatalf("unknown kind %q", c.Kind)
	}
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	obj, perr := parseObject(raw, MaxEnvelopeBytes)
	if perr != nil {
		t.Fatal(perr)
	}
	input, err := signingInput(raw, obj, context)
	if err != nil {
		t.Fatal(err)
	}
	sigs, _ := readSignatures(obj)
	sig := sigs[broker][k.KeyID]
	if *update {
		c.Bytes, c.SigningInput, c.Signature = string(raw), string(input), sig
	}
	if string(raw) != c.Bytes {
		t.Errorf("bytes\n got %s\nwant %s", raw, c.Bytes)
	}
	if string(input) != c.SigningInput {
		t.Errorf("signing input\n got %q\nwant %q", input, c.SigningInput)
	}
	if sig != c.Signature {
		t.Errorf("signature %s, want %s", sig, c.Signature)
	}
	// The file's own bytes verify: with the package, and with bare Ed25519
	// over the file's signing input (what another implementation does).
	if err := VerifySigned([]byte(c.Bytes), context, broker, resolver(keys), time.UnixMilli(vectorNow)); err != nil {
		t.Errorf("VerifySigned(file bytes): %v", err)
	}
	pub, _ := b64url.DecodeString(k.Public)
	sb, _ := b64url.DecodeString(c.Signature)
	if !ed25519.Verify(pub, []byte(c.SigningInput), sb) {
		t.Error("bare ed25519.Verify of the file's signing input and signature fails")
	}
	if err := parseKind(c.Kind, []byte(c.Bytes)); err != nil {
		t.Errorf("parse file bytes: %v", err)
	}
}

func runValidRequest(t *testing.T, c *validCase, k vectorKey, keys map[string]vectorKey) {
	var in requestInput
	mustStrict(t, c.Input, &in)
	nonce, err := b64url.DecodeString(in.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(in.Method, "https://"+in.Destination+in.URI, strings.NewReader(in.Body))
	if err != nil {
		t.Fatal(err)
	}
	if err := signRequest(req, []byte(in.Body), in.Origin, in.Destination, k.KeyID, k.private(t), time.UnixMilli(in.TS), nonce); err != nil {
		t.Fatal(err)
	}
	h := req.Header.Get("Authorization")
	a, err := ParseAuthorization(h)
	if err != nil {
		t.Fatal(err)
	}
	input, err := requestSigningInput(req, []byte(in.Body), a)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		c.Authorization, c.SigningInput, c.Signature = h, string(input), a.Sig
	}
	if h != c.Authorization {
		t.Errorf("Authorization\n got %s\nwant %s", h, c.Authorization)
	}
	if string(input) != c.SigningInput {
		t.Errorf("signing input\n got %q\nwant %q", input, c.SigningInput)
	}
	if a.Sig != c.Signature {
		t.Errorf("signature %s, want %s", a.Sig, c.Signature)
	}
	// The receiving side: the request as a server sees it.
	srv, err := http.NewRequest(in.Method, in.URI, strings.NewReader(in.Body))
	if err != nil {
		t.Fatal(err)
	}
	srv.RequestURI = in.URI
	srv.Header.Set("Authorization", c.Authorization)
	if _, err := VerifyRequest(srv, []byte(in.Body), in.Destination, resolver(keys), time.UnixMilli(vectorNow), 5*time.Minute); err != nil {
		t.Errorf("VerifyRequest(file header): %v", err)
	}
	pub, _ := b64url.DecodeString(k.Public)
	sb, _ := b64url.DecodeString(c.Signature)
	if !ed25519.Verify(pub, []byte(c.SigningInput), sb) {
		t.Error("bare ed25519.Verify of the file's signing input and signature fails")
	}
}

func parseKind(kind string, raw []byte) error {
	var err error
	switch kind {
	case "envelope":
		_, err = ParseEnvelope(raw)
	case "broker_keys":
		_, err = ParseBrokerKeys(raw)
	case "domain_doc":
		_, err = ParseDomainDoc(raw)
	case "accepted":
		_, err = ParseAccepted(raw)
	case "receipt_notice":
		_, err = ParseReceiptNotice(raw)
	case "cosign_request":
		_, err = ParseCosignRequest(raw)
	case "cosigned":
		_, err = ParseCosigned(raw)
	case "authorization":
		_, err = ParseAuthorization(string(raw))
	default:
		return &Error{Code: "test_unknown_kind", Message: kind}
	}
	return err
}

func runInvalid(t *testing.T, c invalidCase, keys map[string]vectorKey) {
	raw := []byte(c.Raw)
	if c.RawB64 != "" {
		var err error
		if raw, err = base64.StdEncoding.DecodeString(c.RawB64); err != nil {
			t.Fatal(err)
		}
	}
	if c.PadTo > 0 {
		raw = append(raw, bytes.Repeat([]byte(" "), c.PadTo-len(raw))...)
	}
	var err error
	if c.Verify {
		if c.Kind != "envelope" {
			t.Fatalf("verify cases are envelopes")
		}
		_, err = VerifyEnvelope(raw, resolver(keys), time.UnixMilli(vectorNow))
	} else {
		err = parseKind(c.Kind, raw)
	}
	if err == nil {
		t.Fatalf("accepted; want %s at %q", c.Code, c.Pointer)
	}
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("error %v is a %T, not an *Error", err, err)
	}
	if e.Code != c.Code || e.Pointer != c.Pointer {
		t.Errorf("got %s at %q (%s), want %s at %q", e.Code, e.Pointer, e.Message, c.Code, c.Pointer)
	}
}

func mustStrict(t *testing.T, b []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		t.Fatalf("input: %v", err)
	}
}
