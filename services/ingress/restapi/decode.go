package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/httproute"
)

// decode reads the request's JSON body into v, strictly: application/json
// (or no Content-Type), one JSON object, no member v does not have. A
// refusal names the member at fault with its JSON pointer.
func decode(r *http.Request, v any) *httpjson.Error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		media, _, err := mime.ParseMediaType(ct)
		if err != nil || media != httpjson.MediaJSON {
			return httpjson.Errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "send the request as %s", httpjson.MediaJSON)
		}
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return httpjson.Errorf(http.StatusRequestEntityTooLarge, httproute.CodeBodyTooLarge, "the request body is larger than %d bytes", mbe.Limit)
		}
		return httpjson.Errorf(http.StatusBadRequest, CodeInvalidRequest, "the request body could not be read")
	}
	if len(bytes.TrimSpace(data)) == 0 || bytes.TrimSpace(data)[0] != '{' {
		return pointed(http.StatusBadRequest, CodeInvalidRequest, "", "the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return pointed(http.StatusBadRequest, CodeInvalidRequest, "", "the request body must be one JSON object, with nothing after it")
	}
	return nil
}

// jsonError says what encoding/json refused, with the member's pointer.
func jsonError(err error) *httpjson.Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return pointed(http.StatusBadRequest, CodeInvalidRequest, "", "the request body is not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		ptr := ""
		if typ.Field != "" {
			ptr = "/" + strings.ReplaceAll(typ.Field, ".", "/")
		}
		return pointed(http.StatusBadRequest, CodeInvalidRequest, ptr, "%s must be a JSON %s", memberName(ptr), jsonKind(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return pointed(http.StatusBadRequest, CodeInvalidRequest, "/"+escapePointer(name), "unknown member %q", truncate(name))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return pointed(http.StatusBadRequest, CodeInvalidRequest, "", "the request body is not valid JSON (it ends early)")
	}
	return pointed(http.StatusBadRequest, CodeInvalidRequest, "", "the request body is not valid JSON")
}

func memberName(ptr string) string {
	if ptr == "" {
		return "the request body"
	}
	return "member " + ptr
}

// jsonKind names a Go kind the way JSON does.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	}
	return "value of another type"
}

// escapePointer escapes one RFC 6901 reference token.
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
