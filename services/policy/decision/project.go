package decision

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Project returns the body with only the leaves at keep (RFC 6901
// pointers, as msgtypes.Type.Fields lists them), replacing the text of the
// pointers in replace (the normalized free text). Object members with
// nothing kept are dropped; an array keeps its length, a withheld item
// becomes null, so every pointer of a verdict still names the same value.
// An empty keep gives "{}".
func Project(body []byte, keep []string, replace map[string]string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decision: decoding the body: %w", err)
	}
	return projectValue(v, keep, replace)
}

// projectValue is Project of a decoded body.
func projectValue(v any, keep []string, replace map[string]string) ([]byte, error) {
	want := make(map[string]mark, 2*len(keep))
	for _, p := range keep {
		want[p] = kept
		// Every ancestor is on the way to a kept leaf.
		for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
			if want[p[:i]] != none {
				break
			}
			want[p[:i]] = onTheWay
		}
	}
	out, ok := prune(v, "", want, replace)
	if !ok {
		return []byte("{}"), nil
	}
	return json.Marshal(out)
}

// mark is what Project knows of a pointer.
type mark uint8

const (
	none mark = iota
	onTheWay
	kept
)

func prune(v any, ptr string, want map[string]mark, replace map[string]string) (any, bool) {
	switch want[ptr] {
	case none:
		if ptr != "" {
			return nil, false
		}
	case kept:
		if s, ok := replace[ptr]; ok {
			return s, true
		}
		return v, true
	}
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, c := range x {
			if cv, ok := prune(c, ptr+"/"+escapeToken(k), want, replace); ok {
				out[k] = cv
			}
		}
		return out, len(out) > 0
	case []any:
		out := make([]any, len(x))
		some := false
		for i, c := range x {
			if cv, ok := prune(c, ptr+"/"+strconv.Itoa(i), want, replace); ok {
				out[i], some = cv, true
			}
		}
		return out, some
	}
	return nil, false
}

func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
