package restapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/alpd-project/alpd/internal/httpjson"
)

// page is one request's window of a list: after the position a cursor
// names, at most limit items.
type page struct {
	after position
	limit int
}

// position is where a page of one list ends: the sort key of its last item.
// A cursor is its JSON, base64url: opaque to clients (they pass it back as
// it came), tied to its list by kind, so a cursor of the connections is
// refused by the types.
type position struct {
	Kind string `json:"k"`
	// Key is the last item's sort key.
	Key string `json:"a"`
	// Time (Unix nanoseconds) sorts before Key where the list is in time
	// order.
	Time int64 `json:"t,omitempty"`
}

func (p position) cursor() string {
	b, _ := json.Marshal(p) // a struct of strings and an int always encodes
	return base64.RawURLEncoding.EncodeToString(b)
}

// maxCursor bounds what is decoded of a cursor: its key is an id or a
// type name.
const maxCursor = 1024

// pageOf reads ?after= and ?limit= for a list of kind.
func pageOf(r *http.Request, kind string) (page, *httpjson.Error) {
	q := r.URL.Query()
	p := page{limit: DefaultPageSize, after: position{Kind: kind}}
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			return page{}, httpjson.Errorf(http.StatusBadRequest, CodeInvalidLimit, "limit must be a whole number from 1 to %d", MaxPageSize)
		}
		p.limit = n
	}
	if c := q.Get("after"); c != "" {
		pos, ok := parseCursor(c, kind)
		if !ok {
			return page{}, httpjson.Errorf(http.StatusBadRequest, CodeInvalidCursor,
				"after must be a cursor this list answered as next, passed back unchanged")
		}
		p.after = pos
	}
	return p, nil
}

func parseCursor(c, kind string) (position, bool) {
	if len(c) > maxCursor {
		return position{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return position{}, false
	}
	var pos position
	if err := json.Unmarshal(b, &pos); err != nil || pos.Kind != kind || pos.Key == "" {
		return position{}, false
	}
	return pos, true
}

// listJSON is one page of a list; Next, when present, is the cursor of the
// next page (?after=).
type listJSON[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next,omitempty"`
}

// window cuts the page out of items, sorted by key (ascending); key gives
// an item's position.
func window[T any](items []T, p page, key func(T) position) listJSON[T] {
	start := 0
	if p.after.Key != "" {
		for start < len(items) && !after(key(items[start]), p.after) {
			start++
		}
	}
	end := min(start+p.limit, len(items))
	out := listJSON[T]{Items: append([]T{}, items[start:end]...)}
	if end < len(items) {
		out.Next = key(items[end-1]).cursor()
	}
	return out
}

// after reports whether a sorts after b.
func after(a, b position) bool {
	if a.Time != b.Time {
		return a.Time > b.Time
	}
	return a.Key > b.Key
}
