//go:build !cgo

package e2e

// cgoBuild is true when the tests are built with cgo, under which the
// supervisor cannot drop its privileges nor a worker apply its sandbox.
const cgoBuild = false
