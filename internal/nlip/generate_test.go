package nlip

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// randomMessage builds a valid message from every kind of part, for the
// property tests: any message that Validate accepts must survive JSON,
// CBOR and the protobuf header unchanged.
func randomMessage(tb testing.TB, r *rand.Rand) *Message {
	tb.Helper()
	m := NewMessage(randomPart(tb, r))
	m.MessageType = []string{"", "control", "Request", "Error", "notification"}[r.IntN(5)]
	for range r.IntN(7) {
		p := randomPart(tb, r)
		p.Label = []string{"", "", "ag2_context", "INPUT_REQUIRED", "é label", "1"}[r.IntN(6)]
		m.Add(p)
	}
	if err := m.Validate(Limits{}); err != nil {
		tb.Fatalf("generated an invalid message %+v: %v", m, err)
	}
	return m
}

func randomPart(tb testing.TB, r *rand.Rand) Submessage {
	tb.Helper()
	must := func(p Submessage, err error) Submessage {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return p
	}
	text := randomString(r) + randomString(r)
	switch r.IntN(13) {
	case 0:
		return Text([]string{"english", "English", "en-US", "français", "zh_Hans"}[r.IntN(5)], text)
	case 1:
		return must(JSON(randomJSONValue(r, 4)))
	case 2:
		data := make([]byte, r.IntN(40))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		return Binary([]string{"image", "audio", "video", "sensor", "generic"}[r.IntN(5)], []string{"png", ".wav", "mp4"}[r.IntN(3)], data)
	case 3:
		return ConversationToken([]string{"", "broker-1", "9.2.3.5"}[r.IntN(3)], "c-"+strconv.Itoa(r.IntN(1000)))
	case 4:
		return AuthenticationToken("", "secret-"+strconv.Itoa(r.IntN(1000)))
	case 5:
		return Token("authorization", "sdk-secret-"+strconv.Itoa(r.IntN(1000)))
	case 6:
		return URI("https://upload.example/" + strconv.Itoa(r.IntN(1000)))
	case 7:
		return must(LocationGPS(r.Float64()*180-90, r.Float64()*360-180))
	case 8:
		return LocationText(text)
	case 9:
		c, err := JSONContent(randomJSONValue(r, 3))
		if err != nil {
			tb.Fatal(err)
		}
		return Generic("x-acme", c)
	case 10:
		return ErrorText(text)
	case 11:
		c, _ := JSONContent(r.IntN(600))
		return Submessage{Format: FormatError, Subformat: "code", Content: c}
	default:
		return Structured([]string{"python", "xml", "html", "Go"}[r.IntN(4)], TextContent(text))
	}
}

// TestGeneratedMessagesRoundTrip: encode→decode is the identity for JSON
// and CBOR.
func TestGeneratedMessagesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for range 1000 {
		roundTrip(t, randomMessage(t, r))
	}
}
