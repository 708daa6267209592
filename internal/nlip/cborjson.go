package nlip

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"
)

// maxExactInt is the largest integer below which every integer is an exact
// IEEE-754 double, printed by ECMAScript as plain digits.
const maxExactInt = 1 << 53

// appendCanonicalAny writes a value decoded by fxamacker (see
// cborContentMode) as RFC 8785 canonical JSON. Integers are numbers like
// any other (RFC 8785 holds them as doubles), so 2^64-1 becomes
// 18446744073709552000, exactly what a JSON sender of that number gets.
func appendCanonicalAny(out []byte, v any, depth, maxDepth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(out, "null"...), nil
	case bool:
		return strconv.AppendBool(out, x), nil
	case string:
		return appendJSONString(out, x), nil
	case uint64:
		if x < maxExactInt {
			return strconv.AppendUint(out, x, 10), nil
		}
		return appendFloat(out, float64(x))
	case int64:
		if x > -maxExactInt && x < maxExactInt {
			return strconv.AppendInt(out, x, 10), nil
		}
		return appendFloat(out, float64(x))
	case big.Int:
		f, _ := new(big.Float).SetInt(&x).Float64()
		return appendFloat(out, f)
	case float64:
		return appendFloat(out, x)
	case []any:
		if depth+1 > maxDepth {
			return nil, errTooDeep
		}
		out = append(out, '[')
		for i, e := range x {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = appendCanonicalAny(out, e, depth+1, maxDepth); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case map[string]any:
		if depth+1 > maxDepth {
			return nil, errTooDeep
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			if !utf8.ValidString(k) {
				return nil, errNoJSON("a map key that is not valid UTF-8")
			}
			keys = append(keys, k)
		}
		slices.SortFunc(keys, compareUTF16[string])
		out = append(out, '{')
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendJSONString(out, k)
			out = append(out, ':')
			var err error
			if out, err = appendCanonicalAny(out, x[k], depth+1, maxDepth); err != nil {
				return nil, err
			}
		}
		return append(out, '}'), nil
	case []byte:
		return nil, errNoJSON("a byte string (binary data is only allowed as the whole content of format binary)")
	default:
		return nil, errNoJSON(fmt.Sprintf("a %T value", v))
	}
}

// noJSONError is content that has no JSON equivalent.
type noJSONError struct{ what string }

func (e *noJSONError) Error() string {
	return "content holds " + e.what + ", which has no JSON equivalent"
}

func errNoJSON(what string) error { return &noJSONError{what: what} }
