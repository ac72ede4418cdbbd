package sandbox

// SeccompPolicy exposes the filter policy to tests.
var SeccompPolicy = seccompPolicy

// WithoutLandlock returns a copy of p whose Apply skips Landlock.
func WithoutLandlock(p Policy) Policy { p.noLandlock = true; return p }
