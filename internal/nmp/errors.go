package nmp

// Error codes are stable: callers map them to API error codes (ingress
// prefixes them with "nmp_"), so they are never renamed.
const (
	// CodeOutOfRange: a number is outside the range of its field.
	CodeOutOfRange = "out_of_range"
	// CodeInvalidTrust: a trust level is not 0..3 (or not a known enum).
	CodeInvalidTrust = "invalid_trust"
	// CodeInvalidMode: a system mode is not reflex, fast, standard or deep.
	CodeInvalidMode = "invalid_mode"
	// CodeMalformed: the input is not the expected JSON shape.
	CodeMalformed = "malformed"
	// CodeUnknownField: an object has a key the format does not define.
	CodeUnknownField = "unknown_field"
	// CodeTooLarge: the input exceeds a configured bound.
	CodeTooLarge = "too_large"
	// CodeInvalidConfig: a configuration value is unusable.
	CodeInvalidConfig = "invalid_config"
)

// Error is a precise, machine-readable NMP error. Message is complete on its
// own (it names the field), because callers often show only the message.
type Error struct {
	// Code is one of the Code constants.
	Code string
	// Field is the path of the offending value relative to the NMP object,
	// for example "signals.urgency" or "trace[2].agent"; empty when the error
	// is about the whole input.
	Field string
	// Message says what is wrong, for a person.
	Message string
}

func (e *Error) Error() string { return "nmp: " + e.Message }

// newError builds an Error whose message starts with the field, when there is
// one, so that the message alone is enough to find the problem.
func newError(code, field, msg string) *Error {
	if field != "" {
		msg = field + ": " + msg
	}
	return &Error{Code: code, Field: field, Message: msg}
}

// atField returns a copy of err (an *Error from a field-less helper such as
// ParseMilli) placed at field.
func atField(err *Error, field string) *Error {
	if err.Field != "" || field == "" {
		return err
	}
	return newError(err.Code, field, err.Message)
}
