package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkCompressCPU measures the CPU a server process spends per MB of
// real HTML it serves compressed (the Go specification from GOROOT, 0.3
// MB), from /proc (user + system time): gatehouse's one worker under the
// strict sandbox with compress {}, for each coding at its default level
// and gzip at level 1 too, against nginx's one process with gzip at its
// default level (1); identity for each as the baseline. The client is this
// process and is not counted.
//
//	go test -run '^$' -bench BenchmarkCompressCPU -benchtime 200x ./internal/e2e/
func BenchmarkCompressCPU(b *testing.B) {
	dir := workerReadableTempDir(b)
	www := filepath.Join(dir, "www")
	body, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "doc", "go_spec.html"))
	if err != nil {
		b.Skip(err)
	}
	writeTree(b, www, map[string]string{"spec.html": string(body)})
	ng, ngPID := startNginxWith(b, www, nginxGzip)
	h := start(b, fmt.Sprintf(`
workers {
  count = 1
}
log {
  access_log = false
}
route "/" {
  static {
    root = %q
  }
  compress {}
}
route "/level1/" {
  static {
    root = %q
  }
  compress {
    gzip_level = 1
  }
}
`, www, www))
	workers := h.snapshot().Workers
	if len(workers) != 1 {
		b.Fatalf("%d workers, want 1", len(workers))
	}
	for _, tc := range []struct {
		server, coding, target string
	}{
		{"gatehouse", "", "/spec.html"}, {"gatehouse", "gzip", "/spec.html"}, {"gatehouse", "gzip", "/level1/spec.html"},
		{"gatehouse", "zstd", "/spec.html"}, {"gatehouse", "br", "/spec.html"},
		{"nginx", "", "/spec.html"}, {"nginx", "gzip", "/spec.html"},
	} {
		name := tc.server + "/" + tc.coding
		switch {
		case tc.coding == "":
			name += "identity"
		case strings.HasPrefix(tc.target, "/level1/"):
			name += "-level1"
		}
		b.Run(name, func(b *testing.B) {
			addr, pid := h.addr, workers[0].PID
			if tc.server == "nginx" {
				addr, pid = ng, ngPID
			}
			cl := &rawClient{tb: b, src: "127.0.0.1", dst: addr}
			defer cl.close()
			ex := exchange{method: "GET", target: tc.target}
			if tc.coding != "" {
				ex.hdr = []string{"Accept-Encoding", tc.coding}
			}
			var wire int64
			b.ResetTimer()
			before := procCPUTicks(b, pid)
			for range b.N {
				res, got, err := cl.do(ex)
				if err != nil || res.StatusCode != 200 || res.Header.Get("Content-Encoding") != tc.coding {
					b.Fatalf("%v %v", res, err)
				}
				wire += int64(len(got))
			}
			ticks := procCPUTicks(b, pid) - before
			b.StopTimer()
			mb := float64(b.N) * float64(len(body)) / 1e6
			// USER_HZ is 100 on Linux: a tick is 10 ms.
			b.ReportMetric(float64(ticks)*10/mb, "cpu-ms/MB")
			b.ReportMetric(100*float64(wire)/float64(int64(b.N)*int64(len(body))), "%size")
		})
	}
}

// procCPUTicks returns the user and system time of process pid, in clock
// ticks, from /proc/PID/stat.
func procCPUTicks(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14 and stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("parsing %s: %v %v", s, err1, err2)
	}
	return utime + stime
}
