// Command gatehouse runs the gatehouse supervisor, or, as the hidden
// subcommand `gatehouse worker`, one of its sandboxed workers.
package main

import (
	"os"
	"runtime"

	"github.com/gatehouse-dev/gatehouse/cmd/gatehouse/internal/run"
)

func init() {
	// Neither process serves heap profiles. With sampling on, each new
	// allocation site touches another page of the runtime's 1.4 MB
	// profile hash table, which a burst of requests leaves resident (about
	// 0.8 MB a worker, never given back).
	runtime.MemProfileRate = 0
}

func main() {
	os.Exit(run.Main(os.Args[1:], os.Stderr))
}
