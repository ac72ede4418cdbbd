package supervisor

// headSnapshot adds the state of incomplete heads and admission to s.
func (d *dispatcher) headSnapshot(s *Snapshot) {
	s.HeadBytes = d.headBytes
	s.Stress = d.stress
	s.FirstByteTimeout = d.firstByteTimeout()
	s.HeadTimeout = d.headTimeout()
	s.Counters["timeout_head"] = d.timeoutHead
	s.Counters["timeout_head_gap"] = d.timeoutGap
	s.Counters["incomplete_evicted"] = d.incompleteEvicted
	s.Counters["stress_entered"] = d.stressEntered
	s.Counters["heads_buffered"] = d.headsBuffered
	for _, r := range refusedReasons {
		s.Counters["refused_"+r] = d.c.refused[r]
	}
}
