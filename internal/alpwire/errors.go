package alpwire

import (
	"errors"
	"strconv"
	"strings"
)

// Error codes are stable, machine-readable reasons; receivers record them
// with a refusal and answer them in problem documents, so they are never
// renamed.
const (
	// CodeTooLarge: the input is larger than its limit, or one field is
	// longer than its limit.
	CodeTooLarge = "too_large"
	// CodeInvalidJSON: the bytes are not exactly one well-formed JSON value.
	CodeInvalidJSON = "invalid_json"
	// CodeInvalidUTF8: a string is not valid UTF-8 (or escapes a lone
	// surrogate, which no UTF-8 text can hold).
	CodeInvalidUTF8 = "invalid_utf8"
	// CodeDuplicateKey: an object names the same key twice (or an
	// Authorization header the same parameter twice).
	CodeDuplicateKey = "duplicate_key"
	// CodeNotInteger: a number has a fraction or an exponent, or is -0.
	CodeNotInteger = "not_integer"
	// CodeOutOfRange: an integer is outside ±(2^53−1), or a field's own
	// range (negative time, ...).
	CodeOutOfRange = "out_of_range"
	// CodeTooDeep: arrays and objects nest deeper than MaxDepth.
	CodeTooDeep = "too_deep"
	// CodeUnknownField: a member (or header parameter) the format does not
	// define.
	CodeUnknownField = "unknown_field"
	// CodeMissingField: a required member is absent.
	CodeMissingField = "missing_field"
	// CodeWrongType: a member has the wrong JSON type (null included).
	CodeWrongType = "wrong_type"
	// CodeWrongVersion: "wire" (or the header's "v") is not Version.
	CodeWrongVersion = "wrong_version"
	// CodeInvalidValue: a member has the right type but not a valid value
	// (not a UUID, not a DNS name, not one of an enumeration, ...).
	CodeInvalidValue = "invalid_value"
	// CodeBadBase64: a key, signature, digest or nonce is not unpadded
	// base64url of the right length.
	CodeBadBase64 = "bad_base64"
	// CodeBadKeyID: a key id is not "ed25519:<id>" with id [A-Za-z0-9_]+.
	CodeBadKeyID = "bad_key_id"
	// CodeUnknownAlgorithm: a key id names an algorithm other than ed25519.
	CodeUnknownAlgorithm = "unknown_algorithm"
	// CodeBadAuthorization: the Authorization header is absent, of another
	// scheme, or not RFC 9110 auth-params.
	CodeBadAuthorization = "bad_authorization"
	// CodeWrongDestination: a request is addressed to another broker.
	CodeWrongDestination = "wrong_destination"
	// CodeClockSkew: a request's ts is further from now than the skew.
	CodeClockSkew = "clock_skew"
	// CodeNoSignature: the object has no signature by the broker that must
	// have signed it.
	CodeNoSignature = "no_signature"
	// CodeUnknownKey: the signer's published keys do not hold the key id.
	CodeUnknownKey = "unknown_key"
	// CodeKeyExpired: an old key used for something made at or after its
	// expired_ts (old keys never verify new requests).
	CodeKeyExpired = "key_expired"
	// CodeKeyRevoked: a revoked key used for something made at or after its
	// compromised_ts.
	CodeKeyRevoked = "key_revoked"
	// CodeBadSignature: the signature does not verify over the received
	// bytes (tampered, or signed for another context).
	CodeBadSignature = "bad_signature"
)

// Error is why wire input was refused. Pointer is an RFC 6901 JSON pointer
// to the offending value ("" for the whole input); for an Authorization
// header it is "/<parameter>".
type Error struct {
	Code    string
	Pointer string
	Message string
}

func (e *Error) Error() string {
	where := e.Pointer
	if where == "" {
		where = "input"
	}
	return "alpwire: " + where + ": " + e.Message + " (" + e.Code + ")"
}

// CodeOf returns the code of the *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func newErr(code, pointer, msg string) *Error {
	return &Error{Code: code, Pointer: pointer, Message: msg}
}

// child extends a JSON pointer by one reference token, escaped as RFC 6901
// §3 requires.
func child(ptr, token string) string {
	if strings.ContainsAny(token, "~/") {
		token = strings.NewReplacer("~", "~0", "/", "~1").Replace(token)
	}
	return ptr + "/" + token
}

func index(ptr string, i int) string { return ptr + "/" + strconv.Itoa(i) }
