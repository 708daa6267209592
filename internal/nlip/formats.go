package nlip

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The formats of ECMA-430 Table 1 (final text), plus FormatError.
const (
	FormatText       = "text"
	FormatToken      = "token"
	FormatStructured = "structured"
	FormatBinary     = "binary"
	FormatLocation   = "location"
	FormatGeneric    = "generic"
	// FormatError was in the first ECMA-430 draft and removed from the
	// final standard, but nlip_sdk and AG2 still send it (AG2's
	// INPUT_REQUIRED prompt), so alpd accepts it: a documented deviation.
	FormatError = "error"
)

// MessageTypeControl is the one reserved messagetype value (ECMA-430 §5):
// any other value, or none, is a data message.
const MessageTypeControl = "control"

// Token subformat prefixes (ECMA-430 §6.2). nlip_sdk reserves
// "authorization" instead of "authentication", so both count as
// authentication tokens.
const (
	TokenConversation   = "conversation"
	TokenAuthentication = "authentication"
	TokenAuthorization  = "authorization"
)

// normalizeFormat returns the lowercase constant for a known format,
// matched without regard to ASCII case, and false for any other value.
// Returning the constant (not strings.ToLower) keeps decoding free of
// allocations for this field.
func normalizeFormat(f string) (string, bool) {
	for _, known := range [...]string{FormatText, FormatStructured, FormatToken,
		FormatBinary, FormatLocation, FormatGeneric, FormatError} {
		if equalFoldASCII(f, known) {
			return known, true
		}
	}
	return "", false
}

// equalFoldASCII compares without regard to ASCII case only. Unicode case
// folding (strings.EqualFold) would also match "ſ" with "s" or the Kelvin
// sign with "k", letting look-alike field names through.
func equalFoldASCII[S ~string | ~[]byte, T ~string | ~[]byte](a S, b T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

// hasPrefixFoldASCII is strings.HasPrefix without regard to ASCII case.
func hasPrefixFoldASCII(s, prefix string) bool {
	return len(s) >= len(prefix) && equalFoldASCII(s[:len(prefix)], prefix)
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// checkSubformat applies the subformat grammar of a known (normalised)
// format and returns why it fails, or "" when it fits. The grammars are
// deliberately loose where Table 1 is (a language, a program, an
// extension) and exact where it is exact (binary, location, error).
func checkSubformat(format, sub string) string {
	if !utf8.ValidString(sub) {
		return "subformat is not valid UTF-8"
	}
	for _, r := range sub {
		if unicode.IsControl(r) {
			return "subformat contains a control character"
		}
	}
	switch format {
	case FormatText:
		return checkLanguage(sub)
	case FormatToken:
		return checkTokenSubformat(sub)
	case FormatStructured:
		if hasSpace(sub) {
			return "structured subformat must be json, uri, xml, html or a programming language name, without spaces"
		}
	case FormatBinary:
		return checkBinarySubformat(sub)
	case FormatLocation:
		if !equalFoldASCII(sub, "text") && !equalFoldASCII(sub, "gps") {
			return "location subformat must be text or gps"
		}
	case FormatGeneric:
		if strings.TrimSpace(sub) == "" {
			return "generic subformat must name the extension"
		}
	case FormatError:
		if !equalFoldASCII(sub, "code") && !equalFoldASCII(sub, "text") {
			return "error subformat must be code or text"
		}
	}
	return ""
}

// checkLanguage accepts a language name or tag: "english", "English",
// "en-US", "zh_Hans", "español", "Português (Brasil)". It must start with a
// letter and hold only letters, marks, digits, spaces and - _ . ( ).
func checkLanguage(sub string) string {
	for i, r := range sub {
		ok := unicode.IsLetter(r) ||
			i > 0 && (unicode.IsMark(r) || unicode.IsDigit(r) || strings.ContainsRune(" -_.()", r))
		if !ok {
			return "text subformat must name a language (letters, digits, '-', '_'), e.g. english or en-US"
		}
	}
	return ""
}

// checkTokenSubformat accepts <prefix> or <prefix>_<suffix> (ECMA-430
// Table 1, §6.2), e.g. conversation, conversation_9.2.3.5, authorization.
func checkTokenSubformat(sub string) string {
	prefix, suffix, hasSuffix := strings.Cut(sub, "_")
	switch {
	case hasSpace(sub):
		return "token subformat must not contain spaces"
	case prefix == "":
		return "token subformat must start with a prefix, e.g. conversation"
	case hasSuffix && suffix == "":
		return "token subformat has an empty suffix after '_'"
	}
	return ""
}

// binaryContentTypes are the <content> words of the binary subformat.
// Table 1 lists audio, image, sensor and generic; its own examples use
// video, and so does nlip_sdk (add_video), so video is accepted too.
var binaryContentTypes = [...]string{"audio", "image", "video", "sensor", "generic"}

// checkBinarySubformat accepts <content>/<encoding>, e.g. image/png,
// audio/.wav, generic/.zip, audio/wav;base64.
func checkBinarySubformat(sub string) string {
	kind, encoding, ok := strings.Cut(sub, "/")
	if !ok || hasSpace(sub) || encoding == "" || encoding == "." {
		return "binary subformat must be <content>/<encoding>, e.g. image/png"
	}
	for _, known := range binaryContentTypes {
		if equalFoldASCII(kind, known) {
			return ""
		}
	}
	return "binary subformat content must be audio, image, video, sensor or generic"
}

func hasSpace(s string) bool {
	return strings.ContainsFunc(s, unicode.IsSpace)
}
