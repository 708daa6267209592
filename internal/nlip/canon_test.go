package nlip

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gowebpki/jcs"
)

// canonicalJSON runs our canonicalizer on one complete JSON text.
func canonicalJSON(raw []byte) ([]byte, error) {
	s := jsonScanner{data: raw}
	var cz canonicalizer
	out, err := cz.value(&s, nil, 0, unlimited().MaxContentDepth)
	if err != nil {
		return nil, err
	}
	s.skipSpace()
	if s.pos != len(raw) {
		return nil, errors.New("trailing data")
	}
	return out, nil
}

var canonicalSeeds = []string{
	`{"b":1,"a":2}`, `[1,2.5e10,-0,0.000001,1e-7,123456789012345678]`, `"\u0000\u001f\ud83d\ude00\/"`,
	`{"\ud83d\ude00":1,"\ufb01":2,"a":3,"":4}`, `{"a":{"c":[{"e":1,"d":2}],"b":null}}`, `true`, ` null `,
	`[9007199254740993, 1E400]`, `{"a":1,"a":2}`, `"\ud800"`, `[01]`, `{"a" 1}`, "[\"\xff\"]",
	`[4.35, 0.1, 1e23, 5e-324, 1.7976931348623157e308]`,
}

// TestCanonicalMatchesJCS checks our RFC 8785 output against
// gowebpki/jcs, the reference implementation, on fixed and random inputs.
func TestCanonicalMatchesJCS(t *testing.T) {
	inputs := append([]string(nil), canonicalSeeds...)
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		b, err := json.Marshal(randomJSONValue(r, 4))
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		compareWithJCS(t, []byte(in))
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { compareWithJCS(t, data) })
}

func compareWithJCS(t *testing.T, in []byte) {
	t.Helper()
	ours, ourErr := canonicalJSON(in)
	theirs, theirErr := jcs.Transform(in)
	switch {
	case ourErr != nil && theirErr != nil:
		return
	case ourErr != nil:
		t.Fatalf("%q: we reject (%v), jcs gives %s", in, ourErr, theirs)
	case theirErr != nil:
		t.Fatalf("%q: we give %s, jcs rejects (%v)", in, ours, theirErr)
	case !bytes.Equal(ours, theirs):
		t.Fatalf("%q:\n ours %s\n  jcs %s", in, ours, theirs)
	}
	again, err := canonicalJSON(ours)
	if err != nil || !bytes.Equal(again, ours) {
		t.Fatalf("canonical form %s is not a fixed point: %s, %v", ours, again, err)
	}
}

// randomJSONValue builds a JSON value of the kinds NLIP content holds:
// unsorted objects, non-ASCII and escaped keys, all number shapes.
func randomJSONValue(r *rand.Rand, depth int) any {
	kind := r.IntN(8)
	if depth == 0 {
		kind = r.IntN(5)
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return randomString(r)
	case 3:
		return []float64{0, -1, 1e21, 1e-7, 0.1, 123456789, 1 << 60, 5e-324, -2.5}[r.IntN(9)] * float64(r.IntN(3)+1)
	case 4:
		return r.NormFloat64() * float64(int(1)<<r.IntN(60))
	case 5, 6:
		m := map[string]any{}
		for range r.IntN(5) {
			m[randomString(r)] = randomJSONValue(r, depth-1)
		}
		return m
	default:
		a := make([]any, r.IntN(5))
		for i := range a {
			a[i] = randomJSONValue(r, depth-1)
		}
		return a
	}
}

func randomString(r *rand.Rand) string {
	alphabet := []string{"a", "B", "z", "é", "\n", "\"", "\\", "/", "\u0001", "😀", "ﬁ", "\u2028", " ", "<"}
	var b []byte
	for range r.IntN(6) {
		b = append(b, alphabet[r.IntN(len(alphabet))]...)
	}
	return string(b)
}
