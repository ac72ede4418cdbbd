//go:build race

package compress

// raceEnabled: the race detector's instrumentation allocates, so the
// allocation tests do not count under it.
const raceEnabled = true
