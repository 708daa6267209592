package federation_test

import (
	"os"
	"testing"

	"github.com/alpd-project/alpd/test/internal/alpdtest"
)

func TestMain(m *testing.M) { os.Exit(alpdtest.Main(m)) }
