//go:build !linux

package sandbox

// CheckBuild reports nothing outside Linux: no layer there depends on how
// the binary was built.
func CheckBuild() error { return nil }
