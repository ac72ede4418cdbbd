package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gatehouse-dev/gatehouse/spawner"
	"github.com/gatehouse-dev/gatehouse/worker"
)

// gatehouseBin is the real gatehouse binary, built once by TestMain for the
// tests that run the command itself.
var gatehouseBin string

// TestMain turns this test binary into a worker when the supervisor
// re-executes it, so every test's workers are real processes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "worker":
			os.Exit(worker.Run(os.Args[2:], worker.Options{Handlers: testHandlers()}))
		case "hostile-worker":
			os.Exit(hostileWorker(os.Args[2:]))
		case usernsRefusedArg:
			os.Exit(usernsRefused(os.Args[2:]))
		case spawner.Arg:
			os.Exit(spawner.Main())
		}
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if cgoBuild {
		fmt.Fprintln(os.Stderr, "e2e: built with cgo, under which gatehouse cannot drop privileges or sandbox its workers; run make test, or CGO_ENABLED=0 go test ./...")
		return 2
	}
	dir, err := os.MkdirTemp("", "gatehouse-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	gatehouseBin = filepath.Join(dir, "gatehouse")
	build := exec.Command("go", "build", "-o", gatehouseBin, "github.com/gatehouse-dev/gatehouse/cmd/gatehouse")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building gatehouse:", err)
		return 1
	}
	return m.Run()
}
