// Package sysio is the one copy of gatehouse's raw socket system calls
// that never block: recv and send on a client socket for the dispatcher,
// recvmsg and sendmsg on a worker channel for ipc, and read, write, a
// gathering sendmsg and a peek on a client socket for the worker's
// transport. The dispatcher's and ipc's pass MSG_DONTWAIT, so they return
// at once whatever the descriptor's flags; the worker's rely on the
// O_NONBLOCK its socket arrived with (read and write take no flags), and
// its peek is a recvmsg: the worker's system-call filter allows recvmsg
// and sendmsg, read and write, and not recvfrom or sendto.
//
// On Linux they are made without the runtime's system-call bookkeeping
// (RawSyscall): a call counted as blocking wakes the runtime's monitor from
// its deep sleep, and lets it hand the caller's processor to another thread
// when the call outlasts its 20 µs tick (a worker has one processor, and a
// loopback write runs the receiver's TCP input in the writer's call; the
// dispatcher's loop runs on one). Nor do they take the peer's address:
// unix.Recvfrom and unix.Recvmsg decode it into a Sockaddr, a heap
// allocation per call, and the callers know their peers already. Elsewhere
// they are x/sys/unix's calls.
package sysio
