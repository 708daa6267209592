package nlip

import (
	"path/filepath"
	"testing"
)

// rejectedSamples are the samples ECMA-430 itself rejects, with the
// precise verdict (docs/nlip.md, "Deviations from the sources").
var rejectedSamples = map[string]struct{ code, pointer, why string }{
	// ECMA-432 §8 Example 3 truncates its base64 audio with a literal
	// "...", which is not base64; the same bytes without "..." decode (see
	// TestSampleAudioWithoutEllipsis).
	"ecma432-ws-text-fallback-audio.json": {CodeInvalidContent, "/content", "truncated base64"},
	// nlip_server_go's README predates the final Table 1: subformat "jpeg"
	// is not <content>/<encoding>, and its content is a placeholder.
	"nlip_server_go-readme-text-with-image.json": {CodeInvalidSubformat, "/submessages/0/subformat", "pre-spec subformat"},
}

func TestSamplesDecode(t *testing.T) {
	for _, path := range sampleFiles(t) {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			m, err := DecodeJSON(readFile(t, path), Limits{})
			if want, rejected := rejectedSamples[name]; rejected {
				wantError(t, err, want.code, want.pointer)
				return
			}
			if err != nil {
				t.Fatalf("DecodeJSON: %v", err)
			}
			if err := m.Validate(Limits{}); err != nil {
				t.Fatalf("decoded sample does not validate: %v", err)
			}
			roundTrip(t, m)
		})
	}
}

func TestRejectedSamplesExist(t *testing.T) {
	for name := range rejectedSamples {
		readFile(t, filepath.Join("testdata/samples", name))
	}
}

func TestSampleAudioWithoutEllipsis(t *testing.T) {
	m := mustDecodeJSON(t, `{"MessageType":"Request","Format":"binary","Subformat":"audio/wav;base64",
		"Content":"UklGRngAAABXQVZFZm10IBAAAAABAAEAESsAACJWAAACABAAZGF0YYAA",
		"Submessages":[{"Label":"transcription","Format":"text","Subformat":"en-US",
		"Content":"What's the current stock price of Tesla?"}]}`)
	b, ok := m.Content.Binary()
	if !ok || len(b) != 42 || string(b[:4]) != "RIFF" {
		t.Fatalf("content = %v %q, want 42 bytes of RIFF audio", ok, b)
	}
	if m.MessageType != "Request" || m.Submessages[0].Label != "transcription" {
		t.Fatalf("decoded %+v", m)
	}
}

// TestSampleShapes pins what the interesting samples decode to.
func TestSampleShapes(t *testing.T) {
	load := func(name string) *Message {
		t.Helper()
		return mustDecodeJSON(t, string(readFile(t, filepath.Join("testdata/samples", name))))
	}

	ecmaError := load("ecma432-cbor-decode-error.json")
	if ecmaError.MessageType != "Error" || ecmaError.Format != FormatText || ecmaError.Subformat != "English" {
		t.Errorf("ECMA-432 error sample = %+v", ecmaError)
	}

	inputRequired := load("ag2-beta-response-tool-calls-and-input-required-CONSTRUCTED.json")
	prompt, ok := inputRequired.FindLabel("input_required")
	if text, _ := prompt.Content.Text(); !ok || prompt.Format != FormatError || text != "Approve deleting account victim-7? (y/n)" {
		t.Errorf("INPUT_REQUIRED = %+v, %v", prompt, ok)
	}
	calls, _ := inputRequired.FindLabel("ag2_tool_calls")
	if j, _ := calls.Content.JSON(); string(j) != `{"calls":[{"arguments":"{}","id":"call_1","name":"get_time"}]}` {
		t.Errorf("ag2_tool_calls content = %s", j)
	}

	control := load("nlip_sdk-control-message.json")
	if !control.IsControl() {
		t.Error("control sample is not a control message")
	}

	auth := load("nlip_sdk-authentication-token.json")
	if got := auth.AuthenticationTokens(); len(got) != 1 || got[0].Subformat != "authorization" {
		t.Errorf("SDK authorization token not recognised: %+v", got)
	}

	integrator := load("tr113-integrator-request-with-submessages.json")
	if len(integrator.Submessages) != 3 || integrator.MessageType != "Request" {
		t.Errorf("TR/113 integrator sample = %+v", integrator)
	}
}
