// Package sys is the thin system-call layer under package sandbox: Landlock,
// capabilities and all-threads prctl calls that x/sys/unix does not wrap.
// Every function wraps errno with the call's name (os.NewSyscallError).
// It holds no policy.
package sys
