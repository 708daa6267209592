package nlipapi

import (
	"errors"
	"io"
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

// readMessage reads and decodes the request body. The route's body limit
// (httproute, the configured message size) already refused a body
// announced as too large unread and cuts one that turns out too large.
func (a *API) readMessage(r *http.Request, media string) (*nlip.Message, *httpjson.Error) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newError(http.StatusRequestEntityTooLarge, "too_large", "the NLIP message is larger than %d bytes", mbe.Limit)
		}
		return nil, newError(http.StatusBadRequest, "unreadable_body", "the request body could not be read")
	}
	m, err := decode(media, data, a.cfg.Message)
	if err != nil {
		return nil, classify(err)
	}
	return m, nil
}

func decode(media string, data []byte, lim nlip.Limits) (*nlip.Message, error) {
	if media == mediaCBOR {
		return nlip.DecodeCBOR(data, lim)
	}
	return nlip.DecodeJSON(data, lim)
}

func encode(media string, m *nlip.Message) ([]byte, error) {
	if media == mediaCBOR {
		return nlip.EncodeCBOR(m)
	}
	return nlip.EncodeJSON(m)
}

// replyMedia answers in the request's encoding (JSON when it is unknown).
func replyMedia(r *http.Request) string {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && mt == mediaCBOR {
		return mediaCBOR
	}
	return mediaJSON
}

// writeMessage writes an NLIP message as the HTTP answer.
func writeMessage(w http.ResponseWriter, r *http.Request, status int, m *nlip.Message) {
	media := replyMedia(r)
	body, err := encode(media, m)
	if err != nil {
		// Our own replies always encode; if one does not, say so plainly.
		http.Error(w, "internal error encoding the NLIP reply", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", media)
	httpjson.NoStore(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
