package nlipapi

import (
	"mime"
	"net/http"

	"github.com/alpd-project/alpd/internal/httpjson"
	"github.com/alpd-project/alpd/internal/nlip"
)

// Media types of the HTTP binding. ECMA-431 names none; JSON is what every
// NLIP client sends, CBOR mirrors the WebSocket binding.
const (
	mediaJSON = "application/json"
	mediaCBOR = "application/cbor"
)

// requestMedia is the request body's media type, or an error for a body of
// another type.
func requestMedia(r *http.Request) (string, *httpjson.Error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", newError(http.StatusUnsupportedMediaType, "unsupported_media_type", "send the NLIP message as %s or %s", mediaJSON, mediaCBOR)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return "", newError(http.StatusUnsupportedMediaType, "unsupported_media_type", "the Content-Type header cannot be parsed")
	}
	switch mt {
	case mediaJSON:
		if cs, ok := params["charset"]; ok && cs != "utf-8" && cs != "UTF-8" {
			return "", newError(http.StatusUnsupportedMediaType, "unsupported_media_type", "NLIP JSON must be UTF-8, not %q", cs)
		}
		return mediaJSON, nil
	case mediaCBOR:
		return mediaCBOR, nil
	}
	return "", newError(http.StatusUnsupportedMediaType, "unsupported_media_type", "%s is not an NLIP media type; send %s or %s", mt, mediaJSON, mediaCBOR)
}

func decode(media string, data []byte, lim nlip.Limits) (*nlip.Message, error) {
	if media == mediaCBOR {
		return nlip.DecodeCBOR(data, lim)
	}
	return nlip.DecodeJSON(data, lim)
}

// replyLimits bound what the door encodes. An answer can hold more than a
// request may (an item holds its fields twice, as text and structured, and
// nests them a few levels deeper), so they are wider than the defaults;
// a page of the inbox is cut to the configured message size (pageMessage).
func replyLimits() nlip.Limits {
	return nlip.Limits{MaxMessageBytes: 16 << 20, MaxContentBytes: 16 << 20, MaxContentDepth: 128}
}

func encode(media string, m *nlip.Message) ([]byte, error) {
	if media == mediaCBOR {
		return nlip.EncodeCBORWithLimits(m, replyLimits())
	}
	return nlip.EncodeJSONWithLimits(m, replyLimits())
}

// replyMedia answers in the request's encoding (JSON when it is unknown).
func replyMedia(r *http.Request) string {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == mediaCBOR {
		return mediaCBOR
	}
	return mediaJSON
}
