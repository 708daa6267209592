package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/alpd-project/alpd/internal/seal"
	"github.com/alpd-project/alpd/services/approvals/items"
)

// Render implements items.Store: the held values opened for their person,
// each leaf a line in plain language, and the RFC 9396-shaped object the
// decision is about.
func (s *Store) Render(ctx context.Context, it items.Item) (items.Rendered, error) {
	plain, err := s.cfg.Sealer.Open(ctx, it.Payload, seal.HeldAAD(it.EnvelopeID, it.ID))
	if errors.Is(err, seal.ErrKeyDestroyed) {
		return items.Rendered{Summary: "The held values were erased.", Details: []items.Detail{},
			AuthorizationDetails: authorizationDetails(it, nil)}, nil
	} else if err != nil {
		return items.Rendered{}, fmt.Errorf("approvals: opening item %s: %w", it.ID, err)
	}
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.UseNumber()
	var body any
	if err := dec.Decode(&body); err != nil {
		return items.Rendered{}, fmt.Errorf("approvals: item %s holds no JSON: %w", it.ID, err)
	}
	classes := map[string]string{}
	for _, f := range it.Disclosed {
		classes[f.Pointer] = f.Class
	}
	var details []items.Detail
	walk("", body, func(ptr string, v any) {
		details = append(details, items.Detail{Pointer: ptr, Label: label(ptr), Value: plainValue(v), Class: classOf(classes, ptr)})
	})
	return items.Rendered{Summary: summary(it, details), Details: details, AuthorizationDetails: authorizationDetails(it, body)}, nil
}

// walk calls leaf for every scalar of v, with its RFC 6901 pointer, in a
// stable order; an amount object ({currency, value}) is one leaf.
func walk(ptr string, v any, leaf func(string, any)) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["currency"]; ok && len(x) == 2 {
			if _, ok := x["value"]; ok {
				leaf(ptr, x)
				return
			}
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walk(ptr+"/"+escape(k), x[k], leaf)
		}
	case []any:
		for i, e := range x {
			walk(ptr+"/"+strconv.Itoa(i), e, leaf)
		}
	default:
		leaf(ptr, v)
	}
}

func escape(k string) string { return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1") }

// classOf is the class of ptr or of the nearest field above it.
func classOf(classes map[string]string, ptr string) string {
	for p := ptr; p != ""; p = p[:strings.LastIndexByte(p, '/')] {
		if c, ok := classes[p]; ok {
			return c
		}
	}
	return ""
}

// label makes "/location/url" read "Location url", "/attendees/0"
// "Attendees 1".
func label(ptr string) string {
	var words []string
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if n, err := strconv.Atoi(tok); err == nil {
			words = append(words, strconv.Itoa(n+1))
			continue
		}
		words = append(words, strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~"))
	}
	s := strings.ReplaceAll(strings.Join(words, " "), "_", " ")
	if s == "" {
		return "Value"
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$`)

// plainValue is how a person reads a value: a date and time with its
// weekday and offset, a duration in words, an amount with its currency.
func plainValue(v any) string {
	switch x := v.(type) {
	case string:
		if t, err := time.Parse(time.RFC3339, x); err == nil {
			return t.Format("Monday 2 January 2006, 15:04 (UTC-07:00)")
		}
		if m := isoDuration.FindStringSubmatch(x); m != nil && x != "P" && x != "PT" {
			return durationWords(m[1:])
		}
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case nil:
		return "none"
	case map[string]any:
		return fmt.Sprintf("%v %v", x["currency"], x["value"])
	}
	return fmt.Sprint(v)
}

func durationWords(parts []string) string {
	var out []string
	for i, unit := range []string{"day", "hour", "minute", "second"} {
		if parts[i] == "" {
			continue
		}
		n, _ := strconv.Atoi(parts[i])
		if n == 0 {
			continue
		}
		w := strconv.Itoa(n) + " " + unit
		if n != 1 {
			w += "s"
		}
		out = append(out, w)
	}
	if len(out) == 0 {
		return "no time"
	}
	return strings.Join(out, " ")
}

// summary is one sentence: who asks what of the person.
func summary(it items.Item, details []items.Detail) string {
	switch it.Kind {
	case items.ConnectionRequest:
		return it.From + " asks to connect with you."
	case items.Commitment:
		s := it.From + " sends " + it.Type + ", which commits you to a " + orWord(it.Commits, "commitment")
		if i := slices.IndexFunc(details, func(d items.Detail) bool { return d.Pointer == "/start" }); i >= 0 {
			s += " on " + details[i].Value
		}
		return s + "."
	}
	n := len(it.Disclosed)
	return fmt.Sprintf("%s sent %s with %d confidential field%s your consumer agents see only if you release %s.",
		it.From, it.Type, n, plural(n), map[bool]string{true: "it", false: "them"}[n == 1])
}

func orWord(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// authorizationDetails is the RFC 9396 authorization_details entry of the
// item: what approving it authorizes.
func authorizationDetails(it items.Item, body any) map[string]any {
	action := map[items.Kind]string{items.ConnectionRequest: "connect", items.ConfidentialFields: "disclose_fields"}[it.Kind]
	if it.Kind == items.Commitment {
		action = "accept_" + orWord(it.Commits, "commitment")
	}
	disclosed := make([]map[string]string, 0, len(it.Disclosed))
	for _, f := range it.Disclosed {
		disclosed = append(disclosed, map[string]string{"path": f.Pointer, "class": f.Class})
	}
	out := map[string]any{
		"type": "alp:" + string(it.Kind), "actions": []string{action}, "identifier": it.EnvelopeID,
		"counterparty": map[string]any{"address": it.From, "agent": it.AgentName, "trust_class": it.AgentClass, "attested": it.Attested},
		"datatypes":    []string{it.Type}, "disclosed_fields": disclosed, "payload_digest": it.PayloadDigest,
	}
	if body != nil {
		out["details"] = body
	}
	return out
}
