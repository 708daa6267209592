package nlip

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	nlipv1 "github.com/alpd-project/alpd/gen/alp/nlip/v1"
	alpv1 "github.com/alpd-project/alpd/gen/alp/v1"
)

// throughWire marshals and unmarshals a header, as the bus does.
func throughWire(t *testing.T, h *nlipv1.NlipHeader) *nlipv1.NlipHeader {
	t.Helper()
	b, err := proto.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var out nlipv1.NlipHeader
	if err := proto.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

// The header mapping is lossless except for authentication tokens, over
// generated messages of every part kind.
func TestHeaderRoundTripProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 2000 {
		m := randomMessage(t, r)
		want, removed := m.WithoutAuthenticationTokens()
		h := ToHeader(m)
		got, err := FromHeader(throughWire(t, h), nil)
		if err != nil {
			t.Fatalf("message %d: FromHeader(ToHeader(%+v)): %v", i, m, err)
		}
		if !got.Equal(want) {
			t.Fatalf("message %d: round trip\n got %+v\nwant %+v", i, got, want)
		}
		if len(removed) == 0 && !got.Equal(m) {
			t.Fatalf("message %d without credentials changed: %+v", i, got)
		}
		wire, _ := proto.Marshal(h)
		for _, cred := range removed {
			secret, _ := cred.Content.Text()
			if secret != "" && bytes.Contains(wire, []byte(secret)) {
				t.Fatalf("message %d: header holds the credential %q", i, secret)
			}
		}
		if len(h.GetLabels()) != len(want.Submessages) {
			t.Fatalf("message %d: %d labels for %d kept submessages", i, len(h.GetLabels()), len(want.Submessages))
		}
		for j, s := range want.Submessages {
			if h.GetLabels()[j] != s.Label {
				t.Fatalf("message %d: label %d = %q, want %q", i, j, h.GetLabels()[j], s.Label)
			}
		}
	}
}

func TestToHeaderShape(t *testing.T) {
	obj, _ := JSONContent(map[string]int{"a": 1})
	m := &Message{MessageType: "CONTROL", Format: "Text", Subformat: "english", Content: TextContent("hi"),
		Submessages: []Submessage{
			Structured("json", obj).WithLabel("ag2_context"),
			Token("Authorization", "cred"),
			Binary("image", "png", []byte{1, 2}).WithLabel("pic"),
			ConversationToken("", "c-1"),
		}}
	h := ToHeader(m)
	if h.GetMessagetype() != "control" || h.GetFormat() != "text" || h.GetSubformat() != "english" {
		t.Errorf("header fields = %q %q %q", h.GetMessagetype(), h.GetFormat(), h.GetSubformat())
	}
	if got := strings.Join(h.GetLabels(), ","); got != "ag2_context,pic," {
		t.Errorf("labels = %q", got)
	}
	subs := h.GetParts().GetSubmessages()
	if len(subs) != 3 || h.GetParts().GetContent().GetText() != "hi" ||
		string(subs[0].GetContent().GetJson()) != `{"a":1}` ||
		!bytes.Equal(subs[1].GetContent().GetBinary(), []byte{1, 2}) ||
		subs[2].GetContent().GetText() != "c-1" || subs[2].GetFormat() != "token" {
		t.Errorf("parts = %v", h.GetParts())
	}
	//lint:ignore SA1019 checking that the deprecated field stays unset
	if h.GetConversationToken() != "" || h.GetSealedParts() != nil || h.GetCorrelationId() != "" {
		t.Errorf("ToHeader set fields it does not own: %v", h)
	}
	if ToHeader(nil) != nil {
		t.Error("ToHeader(nil) != nil")
	}
}

// A caller that moved a submessage's content into the envelope restores it
// through the resolver.
func TestMovedContent(t *testing.T) {
	m := NewMessage(Text("english", "send this"),
		Text("english", "the body").WithLabel("alp_body"),
		ConversationToken("", "c-1"))
	h := ToHeader(m)
	body, err := MoveContent(h, 0, "body")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := body.Text(); s != "the body" {
		t.Fatalf("moved content = %+v", body)
	}
	moved := h.GetParts().GetSubmessages()[0]
	if moved.GetContent() != nil || moved.GetMovedTo() != "body" {
		t.Fatalf("moved submessage = %v", moved)
	}
	h = throughWire(t, h)
	envelope := map[string]Content{"body": body}
	got, err := FromHeader(h, func(to string) (Content, error) {
		c, ok := envelope[to]
		if !ok {
			return Content{}, errors.New("no envelope field " + to)
		}
		return c, nil
	})
	if err != nil || !got.Equal(m) {
		t.Fatalf("FromHeader = %+v, %v", got, err)
	}

	if _, err := FromHeader(h, nil); err == nil || !strings.Contains(err.Error(), `moved to "body"`) {
		t.Fatalf("without a resolver: %v", err)
	}
	errGone := errors.New("body was dropped")
	_, err = FromHeader(h, func(string) (Content, error) { return Content{}, errGone })
	if !errors.Is(err, errGone) {
		t.Fatalf("resolver error not wrapped: %v", err)
	}
	_, err = FromHeader(h, func(string) (Content, error) { return BinaryContent([]byte{1}), nil })
	wantError(t, err, CodeInvalidContent, "/submessages/0/content")

	for name, c := range map[string]struct {
		index int
		to    string
	}{"out of range": {5, "body"}, "negative": {-1, "body"}, "no destination": {1, ""}, "already moved": {0, "to"}} {
		if _, err := MoveContent(h, c.index, c.to); err == nil {
			t.Errorf("MoveContent %s accepted", name)
		}
	}
}

func TestFromHeaderRejects(t *testing.T) {
	valid := func() *nlipv1.NlipHeader {
		return ToHeader(NewMessage(Text("english", "hi"), Text("english", "x").WithLabel("a")))
	}
	cases := map[string]struct {
		mutate func(h *nlipv1.NlipHeader)
		code   string // "" for a plain (shape) error
		ptr    string
	}{
		"sealed":            {func(h *nlipv1.NlipHeader) { h.Parts, h.SealedParts = nil, &alpv1.SealedBody{} }, "", ""},
		"no parts":          {func(h *nlipv1.NlipHeader) { h.Parts = nil }, "", ""},
		"label count":       {func(h *nlipv1.NlipHeader) { h.Labels = nil }, "", ""},
		"label mismatch":    {func(h *nlipv1.NlipHeader) { h.Labels[0] = "b" }, "", ""},
		"present and moved": {func(h *nlipv1.NlipHeader) { h.Parts.Submessages[0].MovedTo = "body" }, "", ""},
		"bad json": {func(h *nlipv1.NlipHeader) {
			h.Parts.Content = &nlipv1.Content{Value: &nlipv1.Content_Json{Json: []byte("{")}}
		}, "", ""},
		"unknown format":    {func(h *nlipv1.NlipHeader) { h.Format = "foo" }, CodeUnknownFormat, "/format"},
		"no content":        {func(h *nlipv1.NlipHeader) { h.Parts.Submessages[0].Content = nil }, CodeMissingField, "/submessages/0/content"},
		"text for binary":   {func(h *nlipv1.NlipHeader) { h.Format, h.Subformat = "binary", "image/png" }, CodeInvalidContent, "/content"},
		"invalid subformat": {func(h *nlipv1.NlipHeader) { h.Parts.Submessages[0].Subformat = "" }, CodeMissingField, "/submessages/0/subformat"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := valid()
			c.mutate(h)
			m, err := FromHeader(h, nil)
			if err == nil {
				t.Fatalf("accepted: %+v", m)
			}
			if c.code != "" {
				wantError(t, err, c.code, c.ptr)
			} else if CodeOf(err) != "" {
				t.Fatalf("shape error reported as a validation error: %v", err)
			}
		})
	}
	if _, err := FromHeader(nil, nil); err == nil {
		t.Fatal("FromHeader(nil) accepted")
	}
	// JSON content from another broker is re-canonicalised; a JSON string
	// becomes text, as it would from the wire.
	h := valid()
	h.Format, h.Subformat = "structured", "json"
	h.Parts.Content = &nlipv1.Content{Value: &nlipv1.Content_Json{Json: []byte(`{ "b":1, "a":"\u0041" }`)}}
	h.Parts.Submessages[0].Content = &nlipv1.Content{Value: &nlipv1.Content_Json{Json: []byte(`"x"`)}}
	m, err := FromHeader(h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := m.Content.JSON(); string(j) != `{"a":"A","b":1}` {
		t.Errorf("content = %s", j)
	}
	if s, ok := m.Submessages[0].Content.Text(); !ok || s != "x" {
		t.Errorf("JSON string content = %+v", m.Submessages[0].Content)
	}

	// Enumerated values are normalised as a decoder would.
	h = valid()
	h.Messagetype, h.Format, h.Parts.Submessages[0].Format = "Control", "TEXT", "Text"
	m, err = FromHeader(h, nil)
	if err != nil || m.MessageType != "control" || m.Format != "text" || m.Submessages[0].Format != "text" {
		t.Errorf("FromHeader did not normalise: %+v, %v", m, err)
	}
}
