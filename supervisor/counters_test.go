package supervisor

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestSummaryLine(t *testing.T) {
	counts := func(kv ...any) eventCounts {
		var c eventCounts
		for i := 0; i < len(kv); i += 2 {
			for j, name := range routineEvents {
				if name == kv[i] {
					c[j] = uint64(kv[i+1].(int))
				}
			}
		}
		return c
	}
	prev := counts("peer_closed", 10, "timeout_idle", 4)
	tests := []struct {
		cur   eventCounts
		ok    bool
		level hclog.Level
		args  string
	}{
		{cur: prev},
		{cur: counts("peer_closed", 15, "timeout_idle", 4, "refused_per_client", 3), ok: true, level: hclog.Info,
			args: "[period 1m0s refused_per_client 3 peer_closed 5]"},
		{cur: counts("peer_closed", 10, "timeout_idle", 4, "timeout_no_worker", 1), ok: true, level: hclog.Warn,
			args: "[period 1m0s timeout_no_worker 1]"},
	}
	for i, tt := range tests {
		level, args, ok := summaryLine(prev, tt.cur, time.Minute+20*time.Millisecond)
		if ok != tt.ok || ok && (level != tt.level || fmt.Sprint(args) != tt.args) {
			t.Errorf("%d: %v %v %v, want %v %v %s", i, ok, level, args, tt.ok, tt.level, tt.args)
		}
	}
}
