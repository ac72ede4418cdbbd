// Command gatehousectl inspects and steers a running gatehouse through its
// admin socket: gatehousectl [-socket PATH] [-json] COMMAND [ARGS].
package main

import (
	"os"

	"github.com/gatehouse-dev/gatehouse/cmd/gatehousectl/internal/ctl"
)

func main() {
	os.Exit(ctl.Run(os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}
