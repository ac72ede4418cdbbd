package poll

// FDs returns the Poller's own descriptors.
func (p *Poller) FDs() []int { return p.fds() }
