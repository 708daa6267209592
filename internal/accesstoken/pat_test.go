package accesstoken

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
	"testing"
)

var patRE = regexp.MustCompile(`^alppat_([a-z2-7]{26})_([A-Za-z0-9_-]{43})$`)

func TestNewPAT(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		tok, id, h := NewPAT()
		m := patRE.FindStringSubmatch(tok)
		if m == nil {
			t.Fatalf("token %q does not match the format", tok)
		}
		if m[1] != id {
			t.Errorf("id %q, token id part %q", id, m[1])
		}
		sum := sha256.Sum256([]byte(tok))
		if h != hex.EncodeToString(sum[:]) {
			t.Errorf("hash is not the hex SHA-256 of the token")
		}
		if seen[id] || seen[tok] {
			t.Fatalf("repeated id or token")
		}
		seen[id], seen[tok] = true, true
		if !LooksLikePAT(tok) {
			t.Errorf("LooksLikePAT(%q) = false", tok)
		}

		pid, ph, err := ParsePAT(tok)
		if err != nil {
			t.Fatalf("ParsePAT(new token): %v", err)
		}
		if pid != id || !PATHashEqual(ph, h) {
			t.Errorf("ParsePAT = %q, %q; want %q, %q", pid, ph, id, h)
		}
	}
	if LooksLikePAT("eyJhbGciOiJFZERTQSJ9.e30.AA") {
		t.Error("a JWT looks like a PAT")
	}
}

func TestParsePATErrors(t *testing.T) {
	tok, _, h := NewPAT()
	id := tok[7:33]
	secret := tok[34:]
	flipLast := func(s string, to byte) string { return s[:len(s)-1] + string(to) }
	tests := map[string]string{
		"empty":                     "",
		"prefix only":               "alppat_",
		"short":                     tok[:len(tok)-1],
		"long":                      tok + "A",
		"wrong prefix":              "alppax_" + tok[7:],
		"upper-case prefix":         "ALPPAT_" + tok[7:],
		"wrong separator":           "alppat_" + id + "-" + secret,
		"upper-case id":             "alppat_" + strings.ToUpper(id) + "_" + secret,
		"id with 1":                 "alppat_" + "1" + id[1:] + "_" + secret,
		"secret with +":             "alppat_" + id + "_" + "+" + secret[1:],
		"secret with /":             "alppat_" + id + "_" + secret[:10] + "/" + secret[11:],
		"secret with =":             "alppat_" + id + "_" + secret[:42] + "=",
		"secret with space":         "alppat_" + id + "_" + secret[:20] + " " + secret[21:],
		"secret with NUL":           "alppat_" + id + "_" + secret[:20] + "\x00" + secret[21:],
		"non-canonical id end":      "alppat_" + flipLast(id, 'b') + "_" + secret,
		"non-canonical secret end":  "alppat_" + id + "_" + flipLast(secret, 'B'),
		"bearer JWT":                "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"non-ASCII in secret (len)": "alppat_" + id + "_" + secret[:41] + "é",
	}
	for name, bad := range tests {
		t.Run(name, func(t *testing.T) {
			gotID, gotHash, err := ParsePAT(bad)
			if !errors.Is(err, ErrPATMalformed) {
				t.Fatalf("err = %v, want ErrPATMalformed", err)
			}
			if gotID != "" || gotHash != "" {
				t.Errorf("returned %q, %q with an error", gotID, gotHash)
			}
			if bad != "" && strings.Contains(err.Error(), bad) {
				t.Errorf("error contains the token: %v", err)
			}
			if strings.Contains(err.Error(), secret[:16]) {
				t.Errorf("error contains the secret: %v", err)
			}
		})
	}
	if PATHashEqual(h, strings.Repeat("0", 64)) || PATHashEqual(h, h[:63]) || !PATHashEqual(h, h) {
		t.Error("PATHashEqual")
	}
}
