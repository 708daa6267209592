package nlipapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// ag2Client behaves like AG2's NLIP client (ag2.extensions.nlip NlipClient,
// docs: reference nlip.md §5.2): it POSTs the message as lowercase JSON
// without nulls to {url}/nlip/ with the configured headers, follows no
// redirect (httpx's default), raises on any non-2xx status, validates the
// reply with nlip_sdk 0.1.3's model (sdkValidate) and reads the English text.
type ag2Client struct {
	url     string
	headers map[string]string
}

type ag2Error struct {
	status int
	body   string
}

func (e *ag2Error) Error() string { return fmt.Sprintf("NlipServerError(%d, %s)", e.status, e.body) }

func (c *ag2Client) ask(message map[string]any) (text string, reply map[string]any, err error) {
	body, err := json.Marshal(message)
	if err != nil {
		return "", nil, err
	}
	req, err := http.NewRequest(http.MethodPost, strings.TrimRight(c.url, "/")+"/nlip/", bytes.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json") // httpx json=
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 { // raise_for_status
		return "", nil, &ag2Error{resp.StatusCode, string(data)}
	}
	if err := json.Unmarshal(data, &reply); err != nil {
		return "", nil, fmt.Errorf("response.json(): %w", err)
	}
	if err := sdkValidate(reply); err != nil {
		return "", nil, fmt.Errorf("NLIP_Message.model_validate: %w", err)
	}
	return extractText(reply, "english"), reply, nil
}

// sdkValidate applies nlip_sdk 0.1.3's pydantic model (reference nlip.md
// §4.1-4.2): lowercase keys, format/subformat strings, content a string or
// an object, submessage formats from the SDK's enum (case-insensitive).
func sdkValidate(m map[string]any) error {
	if err := sdkPart(m, false); err != nil {
		return err
	}
	if v, ok := m["messagetype"]; ok && v != nil {
		if _, ok := v.(string); !ok {
			return fmt.Errorf("messagetype: string_type")
		}
	}
	subs, ok := m["submessages"]
	if !ok || subs == nil {
		return nil
	}
	list, ok := subs.([]any)
	if !ok {
		return fmt.Errorf("submessages: list_type")
	}
	for i, s := range list {
		sm, ok := s.(map[string]any)
		if !ok {
			return fmt.Errorf("submessages.%d: model_type", i)
		}
		if err := sdkPart(sm, true); err != nil {
			return fmt.Errorf("submessages.%d.%w", i, err)
		}
	}
	return nil
}

func sdkPart(m map[string]any, sub bool) error {
	format, ok := m["format"].(string)
	if !ok {
		return fmt.Errorf("format: missing")
	}
	if sub {
		switch strings.ToLower(format) {
		case "text", "token", "structured", "binary", "location", "error", "generic":
		default:
			return fmt.Errorf("format: enum")
		}
	}
	if _, ok := m["subformat"].(string); !ok {
		return fmt.Errorf("subformat: missing")
	}
	switch m["content"].(type) {
	case string, map[string]any:
	default:
		return fmt.Errorf("content: string_type, dict_type")
	}
	if l, ok := m["label"]; ok && l != nil {
		if _, ok := l.(string); !ok {
			return fmt.Errorf("label: string_type")
		}
	}
	return nil
}

// extractText is NLIP_Message.extract_text(language): the top-level and
// submessage text parts in that language, joined by spaces.
func extractText(m map[string]any, lang string) string {
	var parts []string
	add := func(p map[string]any) {
		if f, _ := p["format"].(string); strings.EqualFold(f, "text") {
			if sf, _ := p["subformat"].(string); strings.EqualFold(sf, lang) {
				if s, ok := p["content"].(string); ok {
					parts = append(parts, s)
				}
			}
		}
	}
	add(m)
	if subs, ok := m["submessages"].([]any); ok {
		for _, s := range subs {
			if sm, ok := s.(map[string]any); ok {
				add(sm)
			}
		}
	}
	return strings.Join(parts, " ")
}

func TestAG2ClientEndToEnd(t *testing.T) {
	r := newRig(t, rigOptions{})
	client := &ag2Client{url: r.srv.URL, headers: map[string]string{"Authorization": "Bearer " + r.token}}
	// AG2 beta's request shape (mappers.build_request_message): English text
	// plus structured/"JSON" submessages labeled ag2_*; an ALP-aware agent
	// adds the send's messagetype and alp.* submessages.
	message := map[string]any{
		"messagetype": "alp:meeting.request/v1",
		"format":      "text", "subformat": "english", "content": "Ask Bo for a 30 minute planning meeting",
		"submessages": []any{
			map[string]any{"format": "structured", "subformat": "JSON", "label": "ag2_chat_history",
				"content": map[string]any{"events": []any{map[string]any{"kind": "user_input", "parts": []any{map[string]any{"text": "plan"}}}}}},
			map[string]any{"format": "structured", "subformat": "JSON", "label": "ag2_context", "content": map[string]any{}},
			map[string]any{"format": "structured", "subformat": "uri", "label": "alp.to", "content": "acct:bo@other.example"},
			map[string]any{"format": "structured", "subformat": "JSON", "label": "alp.body", "content": map[string]any{"subject": "Planning", "start": "2026-12-03T10:00:00Z", "duration": "PT30M", "attendees": []any{"bo@other.example"}}},
			map[string]any{"format": "token", "subformat": "conversation", "content": "ag2-conv-1"},
		},
	}
	text, reply, err := client.ask(message)
	if err != nil {
		t.Fatalf("AG2 client raised: %v", err)
	}
	if !strings.Contains(text, "refused") || !strings.Contains(text, "a stranger may only send connection.request/v1") {
		t.Errorf("AG2 reads %q", text)
	}
	for k := range reply {
		if k != strings.ToLower(k) {
			t.Errorf("reply key %q is not lowercase", k)
		}
	}
	// nlip_sdk's client keeps the conversation token for the next request.
	found := false
	for _, s := range reply["submessages"].([]any) {
		sm := s.(map[string]any)
		if sm["format"] == "token" && sm["subformat"] == "conversation" && sm["content"] == "ag2-conv-1" {
			found = true
		}
	}
	if !found {
		t.Error("conversation token not echoed")
	}

	// Plain AG2 chat is not an ALP send: answered 200, as an NLIP end-point
	// answers, with English text saying what this broker is and how to send.
	text, _, err = client.ask(map[string]any{"format": "text", "subformat": "english", "content": "How to use Python decorators?"})
	if err != nil || !strings.Contains(text, "ALP broker for "+tenant) || !strings.Contains(text, `"alp:`) {
		t.Errorf("plain chat: %v, AG2 reads %q", err, text)
	}
	var se *ag2Error
	// Without the Authorization header AG2 gets a 401 it raises on.
	anon := &ag2Client{url: r.srv.URL}
	if _, _, err := anon.ask(message); !asErr(err, &se) || se.status != http.StatusUnauthorized {
		t.Errorf("no token: %v", err)
	}
}

func asErr(err error, target **ag2Error) bool {
	e, ok := err.(*ag2Error)
	if ok {
		*target = e
	}
	return ok
}
