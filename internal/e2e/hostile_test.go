package e2e

// hostileWorker is a test-only worker program: slot 0 breaks the protocol in
// the way mode names, before it ever reports Ready, so no client is ever
// dispatched to it; every other slot is a real worker.
func hostileWorker(args []string) int { return 0 }
