package nlip

// field identifies a key of a message or submessage object. Keys are
// matched without regard to ASCII case (ECMA-430 §5), so "Format",
// "format" and "FORMAT" are one field and giving two of them is an error.
type field uint8

const (
	fieldUnknown field = iota
	fieldMessageType
	fieldFormat
	fieldSubformat
	fieldContent
	fieldSubmessages
	fieldLabel
)

// fieldNames are the lowercase spellings used when encoding and in error
// pointers, indexed by field.
var fieldNames = [...]string{
	fieldUnknown:     "",
	fieldMessageType: "messagetype",
	fieldFormat:      "format",
	fieldSubformat:   "subformat",
	fieldContent:     "content",
	fieldSubmessages: "submessages",
	fieldLabel:       "label",
}

// lookupField maps a key to its field. Top-level objects know
// messagetype, format, subformat, content, submessages and label (which
// nlip_sdk allows there; alpd tolerates and drops it). Submessages know
// label, format, subformat and content; anything else is unknown and
// ignored, as the schema has no additionalProperties:false.
func lookupField[K ~string | ~[]byte](key K, top bool) field {
	var f field
	switch len(key) {
	case 5:
		f = fieldLabel
	case 6:
		f = fieldFormat
	case 7:
		f = fieldContent
	case 9:
		f = fieldSubformat
	case 11:
		if lowerASCII(key[0]) == 'm' {
			f = fieldMessageType
		} else {
			f = fieldSubmessages
		}
	default:
		return fieldUnknown
	}
	if !equalFoldASCII(key, fieldNames[f]) {
		return fieldUnknown
	}
	if !top && (f == fieldMessageType || f == fieldSubmessages) {
		return fieldUnknown
	}
	return f
}

// seenKeys tracks the keys of one object to reject case-insensitive
// duplicates. Known fields use a bit set; unknown keys, rare in practice,
// go to a map keyed by their ASCII-lowercased spelling (a map, not a list,
// so many unknown keys cannot make the check quadratic).
type seenKeys struct {
	known   uint16
	unknown map[string]struct{}
}

// add records key and reports false when it was already seen.
func (s *seenKeys) add(f field, key []byte) bool {
	if f != fieldUnknown {
		bit := uint16(1) << f
		if s.known&bit != 0 {
			return false
		}
		s.known |= bit
		return true
	}
	folded := make([]byte, len(key))
	for i, c := range key {
		folded[i] = lowerASCII(c)
	}
	if _, dup := s.unknown[string(folded)]; dup {
		return false
	}
	if s.unknown == nil {
		s.unknown = make(map[string]struct{})
	}
	s.unknown[string(folded)] = struct{}{}
	return true
}
