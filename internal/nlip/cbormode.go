package nlip

import (
	"fmt"
	"math"
	"reflect"
	"sync"

	"github.com/fxamacker/cbor/v2"
)

// cborContentMode returns the fxamacker decoding mode for one content (or
// unknown-field) value under lim. Everything that has no JSON equivalent,
// or that lets a small input cost a lot, is refused: tags, indefinite
// lengths, duplicate map keys, non-string map keys, undefined and
// unassigned simple values, NaN and infinities, invalid UTF-8. Nesting is
// counted from the value itself, so MaxNestedLevels is the content depth
// limit (fxamacker's minimum is 4; the converter checks smaller limits).
func cborContentMode(lim Limits) (cbor.DecMode, error) {
	if lim == DefaultLimits() {
		return defaultCBORContentMode()
	}
	return newCBORContentMode(lim)
}

// defaultCBORContentMode is built once: a DecMode is immutable and safe for
// concurrent use, so this is a lazily computed constant, not shared state.
var defaultCBORContentMode = sync.OnceValues(func() (cbor.DecMode, error) {
	return newCBORContentMode(DefaultLimits())
})

func newCBORContentMode(lim Limits) (cbor.DecMode, error) {
	simple, err := rejectedSimpleValues()
	if err != nil {
		return nil, err
	}
	elements := clamp(lim.MaxMessageBytes, 16, math.MaxInt32) // an element takes at least a byte
	dm, err := cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:  clamp(lim.MaxContentDepth, 4, 65535),
		MaxArrayElements: elements,
		MaxMapPairs:      elements,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		IntDec:           cbor.IntDecConvertNone,
		DefaultMapType:   reflect.TypeFor[map[string]any](),
		UTF8:             cbor.UTF8RejectInvalid,
		SimpleValues:     simple,
		NaN:              cbor.NaNDecodeForbidden,
		Inf:              cbor.InfDecodeForbidden,
	}.DecMode()
	if err != nil {
		return nil, fmt.Errorf("nlip: CBOR decoding mode: %w", err)
	}
	return dm, nil
}

// rejectedSimpleValues refuses every simple value but false, true and null:
// undefined and the unassigned ones have no JSON form.
func rejectedSimpleValues() (*cbor.SimpleValueRegistry, error) {
	var rejects []func(*cbor.SimpleValueRegistry) error
	for v := 0; v <= 255; v++ {
		if v >= 20 && v <= 22 || v >= 24 && v <= 31 {
			continue
		}
		rejects = append(rejects, cbor.WithRejectedSimpleValue(cbor.SimpleValue(v)))
	}
	return cbor.NewSimpleValueRegistryFromDefaults(rejects...)
}

// cborEncMode writes content values deterministically (RFC 8949 §4.2.1
// key order), so EncodeCBOR's output depends only on the message.
var cborEncMode = sync.OnceValues(func() (cbor.EncMode, error) {
	em, err := cbor.EncOptions{Sort: cbor.SortCoreDeterministic}.EncMode()
	if err != nil {
		return nil, fmt.Errorf("nlip: CBOR encoding mode: %w", err)
	}
	return em, nil
})

func clamp(v, lo, hi int) int {
	return min(max(v, lo), hi)
}
