package sandbox

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// pledgePromises is everything a worker needs once its roots are unveiled:
// I/O on held descriptors, descriptors received over the IPC socket (recvfd)
// and handed back (sendfd), and read-only path access (rpath).
const pledgePromises = "stdio recvfd sendfd rpath"

// SpawnAttr returns the worker's SysProcAttr. OpenBSD has no namespaces;
// confinement is pledge and unveil, applied by the worker itself.
func SpawnAttr(p Policy) (*syscall.SysProcAttr, []Layer, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	return &syscall.SysProcAttr{Setsid: true}, nil, nil
}

// Apply unveils every root read-only, locks unveil, and pledges
// pledgePromises with no exec promises.
func Apply(p Policy) ([]Layer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	unveil := Layer{Name: "unveil"}
	unveil.Applied = true
	for _, r := range p.Roots {
		if err := unix.Unveil(r, "r"); err != nil {
			unveil.Applied = false
			unveil.Detail = fmt.Sprintf("unveil %s: %v", r, err)
			break
		}
	}
	if unveil.Applied {
		if err := unix.UnveilBlock(); err != nil {
			unveil.Applied, unveil.Detail = false, fmt.Sprintf("locking unveil: %v", err)
		} else {
			unveil.Detail = fmt.Sprintf("%d root(s) read-only", len(p.Roots))
		}
	}
	pledge := Layer{Name: "pledge"}
	if err := unix.PledgePromises(pledgePromises); err != nil {
		pledge.Detail = err.Error()
	} else {
		pledge.Applied, pledge.Detail = true, pledgePromises
	}
	layers := []Layer{unveil, pledge}
	return layers, p.check(layers)
}
