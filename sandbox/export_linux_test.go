package sandbox

// SeccompPolicy exposes the filter policy to tests.
var SeccompPolicy = seccompPolicy
