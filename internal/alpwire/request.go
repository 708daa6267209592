package alpwire

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
)

// AuthScheme is the HTTP authentication scheme of federation requests.
const AuthScheme = "ALP-Sig"

// MaxAuthorizationLen bounds the Authorization header value.
const MaxAuthorizationLen = 2048

// NonceBytes is the size of a request nonce.
const NonceBytes = 16

// Authorization is the parsed `Authorization: ALP-Sig …` header of a
// federation request.
type Authorization struct {
	Version     string // v, = Version
	Origin      string // the sending broker name
	Destination string // the receiving broker name
	Key         string // "ed25519:<id>"
	TS          int64  // ms since the epoch
	Nonce       string // base64url of NonceBytes random bytes
	Sig         string // base64url Ed25519 signature
}

// requestObject is what the signature of a request covers (under
// CtxRequest, in RFC 8785 form).
type requestObject struct {
	Method        string `json:"method"`
	URI           string `json:"uri"`
	Origin        string `json:"origin"`
	Destination   string `json:"destination"`
	ContentSHA256 string `json:"content_sha256"`
	TS            int64  `json:"ts"`
	Nonce         string `json:"nonce"`
}

// requestURI is the request target as sent (path and query): what the
// client writes on the request line, what the server received.
func requestURI(r *http.Request) string {
	if r.RequestURI != "" {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

func contentDigest(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	return Digest(body)
}

func requestSigningInput(r *http.Request, body []byte, a *Authorization) ([]byte, error) {
	j, err := json.Marshal(requestObject{
		Method: r.Method, URI: requestURI(r), Origin: a.Origin, Destination: a.Destination,
		ContentSHA256: contentDigest(body), TS: a.TS, Nonce: a.Nonce,
	})
	if err != nil {
		return nil, fmt.Errorf("alpwire: encode request: %w", err)
	}
	canon, err := jcs.Transform(j)
	if err != nil {
		return nil, fmt.Errorf("alpwire: canonicalise request: %w", err)
	}
	return append([]byte(CtxRequest+"\n"), canon...), nil
}

// SignRequest sets req's Authorization header: origin's signature by keyID
// over method, path and query, origin, destination (the receiving broker
// name), the SHA-256 of body (the exact bytes req sends), now and a fresh
// nonce.
func SignRequest(req *http.Request, body []byte, origin, destination, keyID string, s crypto.Signer, now time.Time) error {
	var nonce [NonceBytes]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("alpwire: nonce: %w", err)
	}
	return signRequest(req, body, origin, destination, keyID, s, now, nonce[:])
}

func signRequest(req *http.Request, body []byte, origin, destination, keyID string, s crypto.Signer, now time.Time, nonce []byte) error {
	for _, n := range []struct{ name, v string }{{"origin", origin}, {"destination", destination}} {
		if err := dnsProblem(n.v, "/"+n.name); err != nil {
			return fmt.Errorf("alpwire: sign request: %w", err)
		}
	}
	if err := keyIDProblem(keyID, "/key"); err != nil {
		return fmt.Errorf("alpwire: sign request: %w", err)
	}
	a := &Authorization{Version: Version, Origin: origin, Destination: destination, Key: keyID,
		TS: Millis(now), Nonce: b64url.EncodeToString(nonce)}
	input, err := requestSigningInput(req, body, a)
	if err != nil {
		return err
	}
	signer, err := NewSigner(s)
	if err != nil {
		return err
	}
	sig, err := signer.SignMessage(bytes.NewReader(input))
	if err != nil {
		return fmt.Errorf("alpwire: sign request as %s %s: %w", origin, keyID, err)
	}
	a.Sig = b64url.EncodeToString(sig)
	req.Header.Set("Authorization", a.String())
	return nil
}

// String is the header value, every parameter quoted, in a fixed order.
func (a *Authorization) String() string {
	var b strings.Builder
	b.WriteString(AuthScheme)
	for i, p := range [...][2]string{{"v", a.Version}, {"origin", a.Origin}, {"destination", a.Destination},
		{"key", a.Key}, {"ts", strconv.FormatInt(a.TS, 10)}, {"nonce", a.Nonce}, {"sig", a.Sig}} {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(" " + p[0] + `="` + p[1] + `"`)
	}
	return b.String()
}

// ParseAuthorization reads an `ALP-Sig` header value (RFC 9110 §11.2
// auth-params: token or quoted-string values, names without regard to
// case). Every parameter is required and none may repeat; pointers name the
// parameter ("/ts").
func ParseAuthorization(h string) (*Authorization, error) {
	a, err := parseAuthorization(h)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func parseAuthorization(h string) (*Authorization, *Error) {
	if len(h) > MaxAuthorizationLen {
		return nil, newErr(CodeTooLarge, "", "header of "+strconv.Itoa(len(h))+" bytes is longer than "+strconv.Itoa(MaxAuthorizationLen))
	}
	scheme, rest, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, AuthScheme) {
		return nil, newErr(CodeBadAuthorization, "", "the scheme is not "+AuthScheme)
	}
	params := map[string]string{}
	s := rest
	for {
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			break
		}
		i := 0
		for i < len(s) && isTChar(s[i]) {
			i++
		}
		if i == 0 {
			return nil, newErr(CodeBadAuthorization, "", "expected a parameter name at "+strconv.Quote(short(s)))
		}
		name := strings.ToLower(s[:i])
		ptr := child("", name)
		s = strings.TrimLeft(s[i:], " \t")
		if s == "" || s[0] != '=' {
			return nil, newErr(CodeBadAuthorization, ptr, "expected '=' after "+name)
		}
		s = strings.TrimLeft(s[1:], " \t")
		var val string
		if s != "" && s[0] == '"' {
			var b strings.Builder
			j := 1
			for ; j < len(s) && s[j] != '"'; j++ {
				c := s[j]
				if c == '\\' {
					j++
					if j == len(s) {
						break
					}
					c = s[j]
				}
				if c < 0x20 && c != '\t' || c == 0x7f || c >= 0x80 {
					return nil, newErr(CodeBadAuthorization, ptr, "a control or non-ASCII character in a quoted value")
				}
				b.WriteByte(c)
			}
			if j >= len(s) {
				return nil, newErr(CodeBadAuthorization, ptr, "unterminated quoted value")
			}
			val, s = b.String(), s[j+1:]
		} else {
			j := 0
			for j < len(s) && isTChar(s[j]) {
				j++
			}
			if j == 0 {
				return nil, newErr(CodeBadAuthorization, ptr, "expected a token or quoted value")
			}
			val, s = s[:j], s[j:]
		}
		if _, dup := params[name]; dup {
			return nil, newErr(CodeDuplicateKey, ptr, "the parameter "+name+" appears twice")
		}
		params[name] = val
		s = strings.TrimLeft(s, " \t")
		if s == "" {
			break
		}
		if s[0] != ',' {
			return nil, newErr(CodeBadAuthorization, ptr, "expected ',' after "+name)
		}
		s = s[1:]
	}
	for name := range params {
		switch name {
		case "v", "origin", "destination", "key", "ts", "nonce", "sig":
		default:
			return nil, newErr(CodeUnknownField, child("", name), "the parameter "+strconv.Quote(name)+" is not part of "+Version)
		}
	}
	// Checked in this fixed order, so the reported problem is stable.
	for _, name := range [...]string{"v", "origin", "destination", "key", "ts", "nonce", "sig"} {
		if _, ok := params[name]; !ok {
			return nil, newErr(CodeMissingField, "/"+name, "the parameter "+name+" is required")
		}
	}
	a := &Authorization{Version: params["v"], Origin: params["origin"], Destination: params["destination"],
		Key: params["key"], Nonce: params["nonce"], Sig: params["sig"]}
	if a.Version != Version {
		return nil, newErr(CodeWrongVersion, "/v", strconv.Quote(a.Version)+" is not "+Version)
	}
	if err := dnsProblem(a.Origin, "/origin"); err != nil {
		return nil, err
	}
	if err := dnsProblem(a.Destination, "/destination"); err != nil {
		return nil, err
	}
	if err := keyIDProblem(a.Key, "/key"); err != nil {
		return nil, err
	}
	ts := params["ts"]
	if ts == "" || len(ts) > 16 || strings.Trim(ts, "0123456789") != "" || ts[0] == '0' && len(ts) > 1 {
		return nil, newErr(CodeInvalidValue, "/ts", strconv.Quote(short(ts))+" is not a decimal integer")
	}
	a.TS, _ = strconv.ParseInt(ts, 10, 64)
	if a.TS > MaxSafeInteger {
		return nil, newErr(CodeOutOfRange, "/ts", ts+" is larger than 2^53−1")
	}
	if _, problem := decodeB64(a.Nonce, NonceBytes); problem != "" {
		return nil, newErr(CodeBadBase64, "/nonce", problem)
	}
	if _, problem := decodeB64(a.Sig, ed25519.SignatureSize); problem != "" {
		return nil, newErr(CodeBadBase64, "/sig", problem)
	}
	return a, nil
}

// isTChar reports an RFC 9110 tchar.
func isTChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func short(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// VerifyRequest checks r's Authorization header against r (method, request
// target), body (the exact bytes received), destination (this broker's
// name), now and skew, with the origin's key for now: only a current key
// passes (an old key's expired_ts is past, a revoked key's compromise too).
// It returns the header for the caller's own checks: the origin is the
// sender domain's home broker, the nonce not seen within the skew window.
func VerifyRequest(r *http.Request, body []byte, destination string, keys KeyResolver, now time.Time, skew time.Duration) (*Authorization, error) {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return nil, newErr(CodeBadAuthorization, "", "want exactly one Authorization header, got "+strconv.Itoa(len(h)))
	}
	a, perr := parseAuthorization(h[0])
	if perr != nil {
		return nil, perr
	}
	if a.Destination != destination {
		return nil, newErr(CodeWrongDestination, "/destination", "the request is for "+a.Destination+", this is "+destination)
	}
	if d := Time(a.TS).Sub(now); d > skew || d < -skew {
		return nil, newErr(CodeClockSkew, "/ts", "the request was signed "+d.Round(time.Millisecond).String()+" from now, beyond the skew of "+skew.String())
	}
	pub, err := keys(a.Origin, a.Key, now)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, newErr(e.Code, "/key", e.Message)
		}
		return nil, newErr(CodeUnknownKey, "/key", "key "+a.Key+" of "+a.Origin+": "+err.Error())
	}
	input, err := requestSigningInput(r, body, a)
	if err != nil {
		return nil, err
	}
	v, err := NewVerifier(pub)
	if err != nil {
		return nil, newErr(CodeUnknownKey, "/key", err.Error())
	}
	sig, _ := decodeB64(a.Sig, ed25519.SignatureSize)
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(input)); err != nil {
		return nil, newErr(CodeBadSignature, "/sig", "the signature does not verify over this request")
	}
	return a, nil
}
