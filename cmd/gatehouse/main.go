// Command gatehouse runs the gatehouse supervisor, or, as the hidden
// subcommand `gatehouse worker`, one of its sandboxed workers.
package main

import (
	"os"

	"github.com/gatehouse-dev/gatehouse/cmd/gatehouse/internal/run"
)

func main() {
	os.Exit(run.Main(os.Args[1:], os.Stderr))
}
