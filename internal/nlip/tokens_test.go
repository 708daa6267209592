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

// TestTokensOfInvalidMessages: a binding echoes a refused message's tokens
// (ECMA-430 §6.2 asks it of every response): the tokens read whole and
// valid by themselves before the problem, in JSON and CBOR.
func TestTokensOfInvalidMessages(t *testing.T) {
	conv := `{"format":"token","subformat":"conversation","content":"c-1"}`
	auth := `{"label":"who","format":"TOKEN","subformat":"authorization","content":"a-1"}`
	bad := `{"format":"token","subformat":"_x","content":"not echoed"}`
	cases := []struct {
		name, input string
		want        []string
	}{
		{"valid", withSubs(conv + "," + auth), []string{"conversation=c-1", "authorization=a-1"}},
		{"top-level token", `{"format":"token","subformat":"conversation","content":"top"}`, []string{"conversation=top"}},
		{"invalid part after the tokens", withSubs(conv + "," + auth + `,{"format":"text","subformat":"en","content":1}`), []string{"conversation=c-1", "authorization=a-1"}},
		{"invalid top level", `{"format":"foo","subformat":"en","content":"x","submessages":[` + conv + `]}`, []string{"conversation=c-1"}},
		{"invalid token skipped", withSubs(bad + "," + conv + `,{"format":"text"}`), []string{"conversation=c-1"}},
		{"malformed after a token", withSubs(conv + `,{"format":x}`), []string{"conversation=c-1"}},
		{"problem inside the token", withSubs(`{"format":"token","subformat":"conversation","content":"c-1","x":}`), nil},
		{"not JSON", `hello`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := TokensOfJSON([]byte(c.input), Limits{})
			if !reflect.DeepEqual(tokenStrings(got), c.want) {
				t.Errorf("TokensOfJSON = %v, want %v", tokenStrings(got), c.want)
			}
			for _, tok := range got {
				if tok.Format != FormatToken {
					t.Errorf("format %q is not normalised", tok.Format)
				}
			}
			// The same message in CBOR, where it has a CBOR form.
			if m, err := DecodeJSON([]byte(c.input), Limits{}); err == nil {
				data, err := EncodeCBOR(m)
				if err != nil {
					t.Fatal(err)
				}
				if got := TokensOfCBOR(data, Limits{}); !reflect.DeepEqual(tokenStrings(got), c.want) {
					t.Errorf("TokensOfCBOR = %v, want %v", tokenStrings(got), c.want)
				}
			}
		})
	}
	if got := TokensOfJSON([]byte(withSubs(conv)), Limits{MaxMessageBytes: 10}); got != nil {
		t.Errorf("over the size limit: %v", got)
	}
	// CBOR: a submessage cut short after a token.
	cb := cborMap(t, "format", "text", "subformat", "en", "content", "x", "submessages",
		rawCBOR(append(appendCBORHead(nil, majorArray, 2), append(cborMap(t, "format", "token", "subformat", "conversation", "content", "c-1"), 0xa1)...)))
	if got := tokenStrings(TokensOfCBOR(cb, Limits{})); !reflect.DeepEqual(got, []string{"conversation=c-1"}) {
		t.Errorf("TokensOfCBOR of a truncated message = %v", got)
	}
	// EchoTokenParts skips parts that are not tokens.
	resp := NewMessage(Text("english", "a"))
	EchoTokenParts([]Submessage{Text("english", "x"), Token("conversation", "c-1")}, resp)
	if got := tokenStrings(resp.Tokens()); !reflect.DeepEqual(got, []string{"conversation=c-1"}) || len(resp.Submessages) != 1 {
		t.Errorf("EchoTokenParts: %+v", resp.Submessages)
	}
}

func tokenStrings(ps []Submessage) []string {
	var out []string
	for _, p := range ps {
		s, _ := p.Content.Text()
		out = append(out, p.Subformat+"="+s)
	}
	return out
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
