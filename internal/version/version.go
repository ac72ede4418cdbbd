// Package version holds gatehouse's version, which both commands report:
// gatehouse -version, gatehousectl -version, the admin socket's status and
// the gatehouse_build_info metric. It imports nothing, so that gatehousectl
// can report its version without linking the supervisor.
package version

// Version is set when building (the Makefile does):
//
//	go build -ldflags "-X github.com/gatehouse-dev/gatehouse/internal/version.Version=v1.2.3"
var Version = "dev"
