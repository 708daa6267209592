package testkit_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/alpd-project/alpd/internal/testkit"
)

func TestEventuallyRetriesUntilNil(t *testing.T) {
	calls := 0
	testkit.Eventually(t, 5*time.Second, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}, "the third call")
	if calls != 3 {
		t.Fatalf("f called %d times, want 3", calls)
	}
}

func TestLockedBufferRecords(t *testing.T) {
	var buf testkit.LockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	log.Info("wanted", "n", 1)
	log.Info("other")
	fmt.Fprintln(&buf, "not JSON")
	log.Info("wanted", "n", 2)
	recs := buf.Records("wanted")
	if len(recs) != 2 || recs[0]["n"] != float64(1) || recs[1]["n"] != float64(2) {
		t.Fatalf("records %v", recs)
	}
	if got := buf.String(); !bytes.Contains([]byte(got), []byte("not JSON")) {
		t.Fatalf("String() = %q", got)
	}
}

func TestRandKey(t *testing.T) {
	a, b := testkit.RandKey(), testkit.RandKey()
	if len(a) != 32 || bytes.Equal(a, b) {
		t.Fatalf("RandKey gave %x and %x", a, b)
	}
}
