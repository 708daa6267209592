package typestore

import (
	"fmt"
	"testing"

	"github.com/alpd-project/alpd/internal/msgtypes"
	"github.com/alpd-project/alpd/internal/streams"
)

// BenchmarkApply is what replaying one registration costs a replica
// (checks, Check and Register: the schema is compiled twice), to compare
// with BenchmarkRegistryRegister, the registry alone.
func BenchmarkApply(b *testing.B) {
	reg, err := msgtypes.New()
	if err != nil {
		b.Fatal(err)
	}
	s := &Store{reg: reg, tenants: map[string]bool{tenant: true}}
	scratch, err := msgtypes.New()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprintf("example.org/t%d/v1", i)
		typ, err := scratch.Check(tenant, name, schema(9))
		if err != nil {
			b.Fatal(err)
		}
		subj, _ := streams.PolicySubject(tenant, streams.PolicyType, streams.PolicyTypeID(name))
		ev := registeredEvent(tenant, typ, admin)
		b.StartTimer()
		if err := s.apply(subj, uint64(i+1), ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRegistryRegister(b *testing.B) {
	reg, err := msgtypes.New()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if _, err := reg.Register(tenant, fmt.Sprintf("example.org/t%d/v1", i), schema(9)); err != nil {
			b.Fatal(err)
		}
	}
}
