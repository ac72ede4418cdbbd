package e2e

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/supervisor/view"
)

// A worker dies only for a real violation by code inside it, never because
// of what a client sent (docs/DESIGN.md §1). Every end-to-end test checks it
// at its end: the supervisor's death counter must equal the deaths the test
// caused on purpose and declared with expectDeaths (zero unless declared).

// deathSettle bounds how long the check waits for deaths already under way
// (a worker killed but not reaped yet) to be counted.
const deathSettle = 10 * time.Second

// expectDeaths declares that the test kills exactly n workers on purpose.
func (h *harness) expectDeaths(n int) { h.deaths = n }

// checkDeaths runs before the supervisor stops: it waits until no worker is
// between its death and its counting and at least the expected deaths are
// counted, then compares the counter with the expectation.
func (h *harness) checkDeaths() {
	tb := h.t
	if h.stopped {
		return
	}
	deadline := time.Now().Add(deathSettle)
	settled := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := h.sup.Snapshot(ctx)
		cancel()
		if err != nil {
			tb.Errorf("worker death check: reading the supervisor's counters: %v", err)
			return
		}
		got := s.Counters["worker_deaths"]
		// A death is under way while the supervisor has not reaped it, or
		// has not even seen it: a worker it counts as running whose
		// process is gone or a zombie.
		exiting := false
		for _, w := range s.Workers {
			exiting = exiting || w.Exiting || w.PID > 0 && w.State != "dead" && !alive(w.PID)
		}
		// Settled twice in a row, so that a death just caused (a worker
		// crashing right after its last response) is seen too.
		if !exiting && got >= uint64(h.deaths) {
			settled++
		} else {
			settled = 0
		}
		if settled == 2 || time.Now().After(deadline) {
			if got != uint64(h.deaths) {
				tb.Errorf("worker death check: %d workers died (%s), the test expected %d", got, deathList(s), h.deaths)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func deathList(s view.Snapshot) string {
	var parts []string
	for _, d := range s.Deaths {
		parts = append(parts, fmt.Sprintf("%s/%s: %d", d.Reason, d.Signal, d.N))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// expectDeaths declares that the test kills exactly n workers on purpose.
func (p *proc) expectDeaths(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deaths = n
}

// deathLineRE matches the supervisor's log line for one counted worker
// death, in text or JSON form, and captures its reason.
var deathLineRE = regexp.MustCompile(`worker died(?::|",).*?\breason"?[=:]"?(\w+)`)

// checkDeaths counts the death lines the gatehouse binary logged (one per
// death its counter counts) against the expectation. It runs before the
// process is killed.
func (p *proc) checkDeaths() {
	// Let a death under way (a zombie child not reaped and logged yet)
	// reach the log: no zombie child in two polls in a row.
	deadline := time.Now().Add(deathSettle)
	for settled := 0; settled < 2 && time.Now().Before(deadline); {
		select {
		case <-p.exited:
			settled = 2
			continue
		default:
		}
		settled++
		for _, pid := range p.workerPIDs(p.t) {
			if !alive(pid) {
				settled = 0
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.mu.Lock()
	log, want := p.stderr.String(), p.deaths
	p.mu.Unlock()
	reasons := map[string]int{}
	got := 0
	for _, line := range strings.Split(log, "\n") {
		if m := deathLineRE.FindStringSubmatch(line); m != nil {
			reasons[m[1]]++
			got++
		}
	}
	if got != want {
		var parts []string
		for r, n := range reasons {
			parts = append(parts, fmt.Sprintf("%s: %d", r, n))
		}
		sort.Strings(parts)
		p.t.Errorf("worker death check: %d workers died (%s), the test expected %d", got, strings.Join(parts, ", "), want)
	}
}
