package nmp

// Limits bound what ParseAgentHeader reads. Agent headers are untrusted
// input on the broker's front door, so every dimension is capped. A zero
// (or negative) field takes its default, so Limits{} is DefaultLimits().
type Limits struct {
	// MaxBytes is the largest JSON document (default 16 KiB).
	MaxBytes int
	// MaxTraceEntries is the most trace entries an agent may send
	// (default 32).
	MaxTraceEntries int
	// MaxStringBytes bounds each string: agent names, actions, modes
	// (default 256 bytes of UTF-8).
	MaxStringBytes int
	// MaxNumberBytes bounds the text of each number (default 32
	// characters), which keeps decimal parsing cheap.
	MaxNumberBytes int
}

// DefaultLimits: 16 KiB, 32 trace entries, 256-byte strings, 32-character
// numbers. 32 entries of 256+256 bytes fit in 16 KiB.
func DefaultLimits() Limits {
	return Limits{MaxBytes: 16 << 10, MaxTraceEntries: 32, MaxStringBytes: 256, MaxNumberBytes: 32}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBytes <= 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxTraceEntries <= 0 {
		l.MaxTraceEntries = d.MaxTraceEntries
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = d.MaxStringBytes
	}
	if l.MaxNumberBytes <= 0 {
		l.MaxNumberBytes = d.MaxNumberBytes
	}
	return l
}
