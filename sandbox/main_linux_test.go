package sandbox

import (
	"fmt"
	"os"
	"testing"
)

// TestMain stops at once in a build with cgo: these tests apply the real
// layers, which need the all-threads system calls cgo disables.
func TestMain(m *testing.M) {
	if cgoBuild {
		fmt.Fprintln(os.Stderr, ErrCgo)
		os.Exit(2)
	}
	os.Exit(m.Run())
}
