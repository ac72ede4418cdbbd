//go:build !linux && !openbsd

package sandbox

import (
	"runtime"
	"syscall"
)

// SpawnAttr returns an empty SysProcAttr: this system has no sandbox. In
// Strict mode it is an error.
func SpawnAttr(p Policy) (*syscall.SysProcAttr, []Layer, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	missing := []Layer{unsupported("namespaces")}
	if p.Mode == Strict {
		return nil, missing, &NotAppliedError{Layers: missing}
	}
	return &syscall.SysProcAttr{}, missing, nil
}

// Apply applies nothing: in Strict mode it returns an error, in BestEffort
// mode it reports the sandbox as not applied.
func Apply(p Policy) ([]Layer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	layers := []Layer{unsupported("sandbox")}
	return layers, p.check(layers)
}

func unsupported(name string) Layer {
	return Layer{Name: name, Detail: "no sandbox on " + runtime.GOOS}
}
