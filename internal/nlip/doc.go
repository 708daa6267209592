// Package nlip is alpd's model of an NLIP message (ECMA-430): the message
// and its submessages, strict JSON and CBOR codecs, validation against the
// standard's formats and subformats, the token rules of ECMA-430 §6.2, and
// the lossless mapping to the protobuf header carried in ALP envelopes.
//
// The package is the one place where untrusted NLIP bytes become Go values,
// so every decoder checks its input size before parsing, bounds nesting and
// counts, reports each problem as an *Error with a stable code and a JSON
// pointer, and never panics on input.
//
// Content is kept exactly as it was sent: a JSON string stays text, binary
// data (format "binary") is raw bytes, and every other JSON value is held as
// its RFC 8785 canonical form, so two encodings of the same message (JSON or
// CBOR, PascalCase or lowercase keys, any member order) decode to equal
// values. See docs/nlip.md for the rules and the deliberate deviations from
// the standard and from the reference SDK.
package nlip
