//go:build cgo

package sandbox

// cgoBuild is true in a build with cgo (see ErrCgo).
const cgoBuild = true
