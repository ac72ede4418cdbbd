package sandbox

import "errors"

// ErrCgo reports a Linux build with cgo. The Go runtime then refuses
// syscall.AllThreadsSyscall, through which the supervisor's privilege drop
// and every sandbox layer reach all threads, so nothing can be confined.
var ErrCgo = errors.New("sandbox: gatehouse was built with cgo, which disables the all-threads system calls the privilege drop and the sandbox need; " +
	"build it with CGO_ENABLED=0 (make build does), and run the tests with make test or CGO_ENABLED=0 go test ./...")

// CheckBuild returns ErrCgo in a build with cgo, before anything is started
// that would fail on it less clearly.
func CheckBuild() error {
	if cgoBuild {
		return ErrCgo
	}
	return nil
}
