package spawn

import (
	"bytes"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// syncBuffer is a log destination the relay goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Run posts the start, relays the process's output, then posts its end:
// an exit status, or the signal that killed it, only once the output was
// relayed.
func TestRunPostsStartOutputAndEnd(t *testing.T) {
	for _, tt := range []struct {
		script string
		signal syscall.Signal
		code   int
		status string
	}{
		{"echo hello; exit 3", 0, 3, "exited with status 3"},
		{"echo hello; kill -9 $$", syscall.SIGKILL, 0, "killed by signal 9 (killed)"},
	} {
		var out syncBuffer
		posted := make(chan any, 2)
		st := Starter{Path: "/bin/sh", Log: hclog.New(&hclog.LoggerOptions{Output: &out}), Dropped: new(atomic.Uint64),
			Post: func(m any) { posted <- m }}
		go st.Run(7, 2, Command{Args: []string{"-c", tt.script}, Attr: &syscall.SysProcAttr{}})
		next := func() any {
			select {
			case m := <-posted:
				return m
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: nothing posted", tt.script)
				return nil
			}
		}
		s, ok := next().(Started)
		if !ok || s.Err != nil || s.Slot != 7 || s.Gen != 2 || s.PID <= 0 || s.Ch == nil {
			t.Fatalf("%s: first post %+v, want a Started of slot 7, generation 2", tt.script, s)
		}
		s.Ch.Close()
		e, ok := next().(Exited)
		if !ok || e.Slot != 7 || e.Gen != 2 || e.Signal != tt.signal || e.Code != tt.code || e.Status != tt.status {
			t.Errorf("%s: second post %+v, want signal %v, code %d, %q", tt.script, e, tt.signal, tt.code, tt.status)
		}
		if !strings.Contains(out.String(), "worker=7") || !strings.Contains(out.String(), "hello") {
			t.Errorf("%s: output not relayed before the end: %q", tt.script, out.String())
		}
	}
}
