package nlip

import (
	"errors"
	"strconv"
)

// Error codes are stable, machine-readable reasons for rejecting a message.
// Bindings map them to protocol errors (for example HTTP 400/413/422), so
// they must never be renamed.
const (
	// CodeMalformed: the bytes are not one well-formed JSON or CBOR value,
	// or the top level is not an object/map.
	CodeMalformed = "malformed"
	// CodeMissingField: a required field (format, subformat, content) is
	// absent or null.
	CodeMissingField = "missing_field"
	// CodeInvalidType: a field has the wrong JSON/CBOR type, e.g. a numeric
	// format or a submessages value that is not an array.
	CodeInvalidType = "invalid_type"
	// CodeUnknownFormat: format is not one of the ECMA-430 formats (or the
	// legacy "error").
	CodeUnknownFormat = "unknown_format"
	// CodeInvalidSubformat: subformat does not fit its format's grammar.
	CodeInvalidSubformat = "invalid_subformat"
	// CodeInvalidContent: content does not fit its format and subformat, or
	// is not representable (bad base64, duplicate object key, ...).
	CodeInvalidContent = "invalid_content"
	// CodeTooLarge: the encoded message, one content value or one field is
	// larger than its limit.
	CodeTooLarge = "too_large"
	// CodeTooManySubmessages: more submessages than Limits.MaxSubmessages.
	CodeTooManySubmessages = "too_many_submessages"
	// CodeTooDeep: a content value nests arrays/objects deeper than
	// Limits.MaxContentDepth.
	CodeTooDeep = "too_deep"
	// CodeDuplicateField: an object holds the same key twice, compared
	// without regard to ASCII case (ECMA-430 §5 makes case irrelevant, so
	// "format" and "Format" are the same field).
	CodeDuplicateField = "duplicate_field"
)

// Error is why a message was rejected. Pointer is a JSON pointer (RFC 6901)
// to the offending value using the lowercase field names, e.g.
// "/submessages/2/content"; it is "" when the problem is the whole input.
type Error struct {
	Code    string
	Pointer string
	Message string
}

func (e *Error) Error() string {
	where := e.Pointer
	if where == "" {
		where = "message"
	}
	return "nlip: " + where + ": " + e.Message + " (" + e.Code + ")"
}

// CodeOf returns the code of the *Error in err's chain, or "" when there is
// none, so callers can branch on the reason without a type assertion.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newError(code, pointer, msg string) *Error {
	return &Error{Code: code, Pointer: pointer, Message: msg}
}

// pointer helpers build the JSON pointers used in errors. Field names are
// fixed lowercase words and indexes are decimal, so no RFC 6901 escaping is
// needed except for unknown keys (see escapePointerToken).

func partPointer(index int) string {
	if index < 0 {
		return ""
	}
	return "/submessages/" + strconv.Itoa(index)
}

func fieldPointer(part int, field string) string {
	return partPointer(part) + "/" + field
}

// escapePointerToken escapes one reference token per RFC 6901 §3, needed
// only for keys we did not choose (unknown fields).
func escapePointerToken(tok string) string {
	out := make([]byte, 0, len(tok))
	for i := 0; i < len(tok); i++ {
		switch tok[i] {
		case '~':
			out = append(out, '~', '0')
		case '/':
			out = append(out, '~', '1')
		default:
			out = append(out, tok[i])
		}
	}
	return string(out)
}
