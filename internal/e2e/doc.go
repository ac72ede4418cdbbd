// Package e2e holds gatehouse's end-to-end tests: a real supervisor with real
// worker processes (this test binary, re-executed as `worker`), real sockets on
// loopback addresses standing for distinct clients, and real signals.
package e2e
