package nlip

import (
	"reflect"
	"testing"
)

func tokenMessage() *Message {
	return NewMessage(Text("english", "Hello"),
		ConversationToken("", "c-1"),
		Token("authorization", "sdk-cred").WithLabel("auth"),
		Text("english", "world"),
		Token("AuthenticationXYZ_broker", "std-cred"),
		Token("Conversation_9.2.3.5", "c-2"),
		Token("group", "g-1"),
	)
}

func TestTokenClassification(t *testing.T) {
	m := tokenMessage()
	subformats := func(parts []Submessage) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p.Subformat)
		}
		return out
	}
	if got, want := subformats(m.Tokens()), []string{"conversation", "authorization", "AuthenticationXYZ_broker", "Conversation_9.2.3.5", "group"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Tokens = %v, want %v", got, want)
	}
	if got, want := subformats(m.ConversationTokens()), []string{"conversation", "Conversation_9.2.3.5"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ConversationTokens = %v, want %v", got, want)
	}
	if got, want := subformats(m.AuthenticationTokens()), []string{"authorization", "AuthenticationXYZ_broker"}; !reflect.DeepEqual(got, want) {
		t.Errorf("AuthenticationTokens = %v, want %v", got, want)
	}
	// nlip_sdk's reserved-token test cases (prefix match, any case).
	for _, sub := range []string{"authorization", "Authorization", "AuthorizatioN:", "authentication", "AUTHENTICATION_x"} {
		if !IsAuthenticationToken(Token(sub, "x")) {
			t.Errorf("%q is an authentication token", sub)
		}
	}
	for _, sub := range []string{"conversation", "conVersation-id", "Conversation/"} {
		if !IsConversationToken(Token(sub, "x")) {
			t.Errorf("%q is a conversation token", sub)
		}
	}
	for _, p := range []Submessage{Text("authorization", "x"), Token("auth", "x"), Token("xauthorization", "x")} {
		if IsAuthenticationToken(p) {
			t.Errorf("%+v is not an authentication token", p)
		}
	}
	if (*Message)(nil).Tokens() != nil {
		t.Error("nil message has no tokens")
	}
}

func TestWithoutAuthenticationTokens(t *testing.T) {
	m := tokenMessage()
	before := m.Clone()
	kept, removed := m.WithoutAuthenticationTokens()
	if !m.Equal(before) {
		t.Fatal("WithoutAuthenticationTokens modified its receiver")
	}
	if len(removed) != 2 || removed[0].Content != TextContent("sdk-cred") || removed[1].Content != TextContent("std-cred") {
		t.Fatalf("removed = %+v", removed)
	}
	if len(kept.AuthenticationTokens()) != 0 || len(kept.Submessages) != 4 {
		t.Fatalf("kept = %+v", kept)
	}
	if err := kept.Validate(Limits{}); err != nil {
		t.Fatalf("kept message is invalid: %v", err)
	}

	// A message that is itself an authentication token keeps its shape
	// but not the credential.
	only := NewMessage(Token("authentication", "secret"))
	kept, removed = only.WithoutAuthenticationTokens()
	if len(removed) != 1 || removed[0].Content != TextContent("secret") {
		t.Fatalf("removed = %+v", removed)
	}
	if kept.Content != TextContent("") || kept.Format != FormatToken {
		t.Fatalf("kept = %+v", kept)
	}
	if kept, removed := (*Message)(nil).WithoutAuthenticationTokens(); kept != nil || removed != nil {
		t.Fatal("nil message")
	}
}

func TestEchoTokens(t *testing.T) {
	req := mustDecodeJSON(t, `{"format":"text","subformat":"english","content":"q","submessages":[
		{"format":"token","subformat":"conversation_client","content":"c-1"},
		{"format":"TOKEN","subformat":"Authorization","content":"a-1","label":"who"},
		{"format":"text","subformat":"english","content":"not a token"}]}`)
	resp := NewMessage(Text("english", "answer"),
		Token("conversation_client", "c-1"), // already echoed: not duplicated
		Token("conversation_server", "s-9"))
	EchoTokens(req, resp)
	want := NewMessage(Text("english", "answer"),
		Token("conversation_client", "c-1"),
		Token("conversation_server", "s-9"),
		Token("Authorization", "a-1").WithLabel("who"))
	if !resp.Equal(want) {
		t.Fatalf("after echo:\n got %+v\nwant %+v", resp.Submessages, want.Submessages)
	}
	// A token with the same subformat but another value is a different
	// token and is echoed.
	resp2 := NewMessage(Text("english", "a"), Token("conversation_client", "other"))
	EchoTokens(req, resp2)
	if len(resp2.ConversationTokens()) != 2 {
		t.Fatalf("echo = %+v", resp2.Submessages)
	}
	EchoTokens(nil, resp2)
	EchoTokens(req, nil)
}

func TestFindLabel(t *testing.T) {
	m := mustDecodeJSON(t, string(readFile(t, "testdata/samples/ag2-beta-request-CONSTRUCTED.json")))
	ctx, ok := m.FindLabel("AG2_Context")
	if j, _ := ctx.Content.JSON(); !ok || string(j) != `{"tenant_note":"acme"}` {
		t.Fatalf("FindLabel(AG2_Context) = %+v, %v", ctx, ok)
	}
	if _, ok := m.FindLabel("missing"); ok {
		t.Fatal("found a missing label")
	}
	if _, ok := (*Message)(nil).FindLabel("x"); ok {
		t.Fatal("nil message has no labels")
	}
}

func TestExtractText(t *testing.T) {
	m := NewMessage(Text("English", "Hello world!"),
		Text("english", "Goodbye world!"),
		Text("en-US", "skipped"),
		Token("conversation", "not text"),
		Structured("english", TextContent("not the text format")),
		Text("Español", "¡Hola!"))
	if got := m.ExtractText("engLish"); got != "Hello world! Goodbye world!" {
		t.Errorf("ExtractText(engLish) = %q", got)
	}
	if got := m.ExtractText("español"); got != "¡Hola!" {
		t.Errorf("ExtractText(español) = %q", got)
	}
	if got := m.ExtractText("french"); got != "" {
		t.Errorf("ExtractText(french) = %q", got)
	}
}
