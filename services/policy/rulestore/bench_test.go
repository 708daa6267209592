package rulestore

import (
	"testing"

	"github.com/alpd-project/alpd/services/policy/rules"
)

// BenchmarkCurrent is a read of a stored version (compiled once, then a
// cache hit); BenchmarkCompileEachRead is what every read would cost
// without the cache. Compare them as a ratio.
func BenchmarkCurrent(b *testing.B) {
	_, bus := newEnv(b)
	s := openB(b, bus)
	text := []byte(templateB(b, rules.PartySender) + extraForbid)
	if _, err := s.Put(b.Context(), tenant, rules.PartySender, "p_bench", text, person("p_bench"), 0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, _, err := s.Current(tenant, rules.PartySender, "p_bench"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileEachRead(b *testing.B) {
	e := engine(b)
	text := []byte(templateB(b, rules.PartySender) + extraForbid)
	for b.Loop() {
		set, err := e.Validate(rules.PartySender, text)
		if err != nil {
			b.Fatal(err)
		}
		_ = rules.Compile(set)
	}
}
