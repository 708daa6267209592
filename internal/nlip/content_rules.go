package nlip

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
)

// checkContent returns why content c does not fit the (normalised) format
// and its subformat, or "" when it fits. It never sees KindNone (that is a
// missing field) and runs after checkSubformat, so the subformat is known
// to be well formed.
func checkContent(format, sub string, c Content) string {
	if c.kind == KindBinary && format != FormatBinary {
		// JSON could only carry these bytes as a base64 string, which would
		// decode as text: binary content belongs to format binary alone.
		return "binary content is only allowed with format binary"
	}
	switch format {
	case FormatText, FormatToken:
		return needText(format, c)
	case FormatStructured:
		return checkStructured(sub, c)
	case FormatBinary:
		if c.kind != KindBinary {
			return "binary content must be base64 text in JSON or a byte string in CBOR"
		}
	case FormatLocation:
		if equalFoldASCII(sub, "gps") {
			return checkGPS(c)
		}
		return needText("location text", c)
	case FormatError:
		if equalFoldASCII(sub, "code") {
			if c.kind == KindText || c.kind == KindJSON && isJSONNumber(c.data) {
				return ""
			}
			return "error code content must be a string or a number"
		}
		return needText("error text", c)
	}
	// generic: any value; structured <prog> is handled in checkStructured.
	return ""
}

func needText(what string, c Content) string {
	if c.kind != KindText {
		return what + " content must be a string"
	}
	return ""
}

// checkStructured: json content may be any JSON value (a string is a JSON
// text), uri/xml/html must be strings, and a uri must be absolute. For a
// <prog> subformat the representation is the peers' business.
func checkStructured(sub string, c Content) string {
	switch {
	case equalFoldASCII(sub, "uri"):
		if c.kind != KindText {
			return "structured uri content must be a string"
		}
		if !isAbsoluteURI(c.data) {
			return "structured uri content must be an absolute URI"
		}
	case equalFoldASCII(sub, "xml"), equalFoldASCII(sub, "html"):
		return needText("structured "+strings.ToLower(sub), c)
	}
	return ""
}

func isAbsoluteURI(s string) bool {
	if s == "" || hasSpace(s) {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Scheme != ""
}

func isJSONNumber(canonical string) bool {
	return canonical != "" && (canonical[0] == '-' || isDigit(canonical[0]))
}

// checkGPS accepts the two shapes peers use for a position: the string
// "lat,lon" (decimal degrees, spaces allowed around each number) and an
// object with numeric "lat" and "lon" members (others are ignored, e.g.
// "alt"). Latitude must be within ±90, longitude within ±180.
func checkGPS(c Content) string {
	const shape = `location gps content must be "lat,lon" or {"lat":…,"lon":…}`
	var lat, lon float64
	switch c.kind {
	case KindText:
		latText, lonText, ok := strings.Cut(c.data, ",")
		var okLat, okLon bool
		lat, okLat = parseDegrees(latText)
		lon, okLon = parseDegrees(lonText)
		if !ok || !okLat || !okLon {
			return shape
		}
	case KindJSON:
		// A map, not a struct: encoding/json would match "LAT" to a
		// field tagged "lat", and the member names here are content.
		var members map[string]json.RawMessage
		if c.data[0] != '{' || json.Unmarshal([]byte(c.data), &members) != nil ||
			!isJSONNumber(string(members["lat"])) || !isJSONNumber(string(members["lon"])) ||
			json.Unmarshal(members["lat"], &lat) != nil || json.Unmarshal(members["lon"], &lon) != nil {
			return shape
		}
	default:
		return shape
	}
	if lat < -90 || lat > 90 || lon < -180 || lon > 180 {
		return "location gps latitude must be within ±90 and longitude within ±180"
	}
	return ""
}

// parseDegrees parses [+-]digits[.digits], refusing what ParseFloat would
// also take (hex, exponents, Inf, NaN, underscores).
func parseDegrees(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, false
	}
	whole, frac, hasFrac := strings.Cut(body, ".")
	if !allDigits([]byte(whole)) || hasFrac && !allDigits([]byte(frac)) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}
