// Package run is the body of the gatehouse command, kept importable so that
// tests can run the real command in a re-executed test binary.
package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/supervisor"
	"github.com/gatehouse-dev/gatehouse/worker"
	"github.com/hashicorp/go-hclog"
)

// Exit statuses, distinct so that an init system or a script can tell why
// gatehouse stopped.
const (
	ExitOK     = 0
	ExitError  = 1 // a runtime failure
	ExitConfig = 2 // invalid flags or configuration
	ExitBind   = 3 // a listener could not be bound
)

// Main runs gatehouse with args (without the program name) and returns its
// exit status.
func Main(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return worker.Main(args[1:])
	}
	fs := flag.NewFlagSet("gatehouse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration `file` (default: the embedded example configuration)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	if err := fs.Parse(args); err != nil {
		return ExitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gatehouse: unexpected argument %q\n", fs.Arg(0))
		return ExitConfig
	}
	var cfg *config.Config
	var err error
	if *path == "" {
		cfg, err = config.Default()
	} else {
		cfg, err = config.Load(*path)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gatehouse: %v\n", err)
		return ExitConfig
	}
	if *check {
		fmt.Fprintf(stderr, "gatehouse: configuration %s is valid\n", cfg.Filename)
		return ExitOK
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "gatehouse",
		Level:      hclog.LevelFromString(cfg.Log.Level),
		JSONFormat: cfg.Log.Format == "json",
		Output:     stderr,
	})
	sup, err := supervisor.New(cfg, supervisor.Options{Logger: log, ConfigPath: *path})
	if err != nil {
		log.Error("starting", "error", err)
		if errors.Is(err, supervisor.ErrBind) {
			return ExitBind
		}
		return ExitError
	}
	for _, a := range sup.Addrs() {
		log.Info("listening", "address", a.String())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				// Errors are logged by Reload; the running configuration stays.
				sup.Reload(ctx)
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := sup.Run(ctx); err != nil {
		log.Error("stopped", "error", err)
		return ExitError
	}
	return ExitOK
}
