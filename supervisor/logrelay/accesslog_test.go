package logrelay

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Lines as worker/accesslog/accesslog.go writes them, for worker 3.
const (
	goodJSON = `{"time":"2026-12-01T01:02:03.456Z","worker":3,"client":"127.0.0.2","host":"site.example","method":"GET",` +
		`"path":"/a b\"c\\\u000a\u0000é\ufffd\u009b","proto":"HTTP/1.1","status":200,"bytes":104857600,` +
		`"duration_us":1234,"referer":"https://r.example/x","user_agent":"curl/8"}`
	goodCombined = `127.0.0.0/24 - - [01/Dec/2026:01:02:03 +0000] "GET /a b\x22c\x5c\x0a\x00\xc3\xa9\xff HTTP/1.1" 200 0 "-" "curl/8"`
	goodVHost    = `a-1.site.example ` + goodCombined
)

// A worker's line passes only as the access line it is: never as one of the
// supervisor's own log lines, with a journald priority prefix, with raw
// control bytes (C0, DEL, C1) or invalid UTF-8, nor as another worker's.
func TestAccessLineRefusesForgeries(t *testing.T) {
	for _, tt := range []struct {
		name   string
		line   string
		format Format
		ok     bool
	}{
		{"json", goodJSON, JSON, true},
		{"combined", goodCombined, Combined, true},
		{"combined ipv6, empty referer", `- - - [01/Dec/2026:01:02:03 +0000] "- - -" 400 -1 "" "-"`, Combined, true},
		{"journald priority", "<0>" + goodJSON, JSON, false},
		{"journald priority, combined", "<0>" + goodCombined, Combined, false},
		{"hclog json", `{"@level":"error","@message":"killing worker","@module":"gatehouse.dispatcher","@timestamp":"2026-12-01T01:02:03.456Z"}`, JSON, false},
		{"hclog text", `2026-12-01T01:02:03.456Z [ERROR] gatehouse.dispatcher: killing worker: worker=1`, JSON, false},
		{"hclog text, combined", `2026-12-01T01:02:03.456Z [ERROR] gatehouse.dispatcher: killing worker: worker=1`, Combined, false},
		{"another worker", strings.Replace(goodJSON, `"worker":3`, `"worker":4`, 1), JSON, false},
		{"worker 03", strings.Replace(goodJSON, `"worker":3`, `"worker":03`, 1), JSON, false},
		{"extra key", strings.Replace(goodJSON, `{"time"`, `{"@level":"error","time"`, 1), JSON, false},
		{"trailing key", strings.TrimSuffix(goodJSON, "}") + `,"@level":"error"}`, JSON, false},
		{"raw C1", strings.Replace(goodJSON, `\u009b`, "\u009b", 1), JSON, false},
		{"raw ESC", strings.Replace(goodJSON, `\u0000`, "\x1b", 1), JSON, false},
		{"raw DEL", strings.Replace(goodJSON, `\u0000`, "\x7f", 1), JSON, false},
		{"invalid UTF-8", strings.Replace(goodJSON, `\ufffd`, "\xff", 1), JSON, false},
		{"lone C1 byte", strings.Replace(goodJSON, `\ufffd`, "\x9b", 1), JSON, false},
		{"bad escape", strings.Replace(goodJSON, `\u0000`, `\e`, 1), JSON, false},
		{"raw CR", strings.Replace(goodJSON, `\u0000`, "\r", 1), JSON, false},
		{"combined raw byte", strings.Replace(goodCombined, `\xc3\xa9`, "é", 1), Combined, false},
		{"combined raw quote", strings.Replace(goodCombined, `\x22`, `"`, 1), Combined, false},
		{"combined client", "<0>" + strings.TrimPrefix(goodCombined, "127.0.0.0/24"), Combined, false},
		{"json as combined", goodJSON, Combined, false},
		{"combined as json", goodCombined, JSON, false},
		{"cut", goodJSON[:len(goodJSON)-1], JSON, false},
		{"no host", strings.Replace(goodJSON, `"host":"site.example",`, "", 1), JSON, false},
		{"host after method", strings.Replace(strings.Replace(goodJSON, `"host":"site.example",`, "", 1), `"method":"GET",`, `"method":"GET","host":"x",`, 1), JSON, false},
		{"vhost", goodVHost, VHostCombined, true},
		{"vhost, escaped and no host", `a\x20b\x3c:[::1] ` + goodCombined, VHostCombined, false},
		{"vhost, escaped", `a\x20b\x3c ` + goodCombined, VHostCombined, true},
		{"vhost, none", `- ` + goodCombined, VHostCombined, true},
		{"vhost, empty", ` ` + goodCombined, VHostCombined, false},
		{"vhost, raw space", `a b ` + goodCombined, VHostCombined, false},
		{"vhost, upper case", `Site.example ` + goodCombined, VHostCombined, false},
		{"vhost, journald priority", `<0>site ` + goodCombined, VHostCombined, false},
		{"vhost, hclog timestamp", `2026-12-01T01:02:03.456Z ` + goodCombined, VHostCombined, false},
		{"vhost, bad escape", `a\x2 ` + goodCombined, VHostCombined, false},
		{"vhost as combined", goodVHost, Combined, false},
		{"combined as vhost", goodCombined, VHostCombined, false},
		{"json as vhost", goodJSON, VHostCombined, false},
	} {
		if got := accessLine([]byte(tt.line), 3, tt.format); got != tt.ok {
			t.Errorf("%s: accessLine = %v, want %v: %q", tt.name, got, tt.ok, tt.line)
		}
	}
}

// The relay copies a worker's lines from a real pipe to the log whole and in
// order, however the worker's writes cut them, and drops every line that is
// not one of its access lines, counting them.
func TestAccessRelayWritesOnlyAccessLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	k := NewSink(hclog.New(&hclog.LoggerOptions{Output: &logs}))
	k.Set(fd)
	defer k.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		k.Relay(r, 3, JSON)
		close(done)
	}()
	forged := []string{
		"<0>" + goodJSON,
		`{"@level":"error","@message":"FORGED","@module":"gatehouse"}`,
		strings.Replace(goodJSON, `"worker":3`, `"worker":1`, 1),
		strings.Replace(goodJSON, `\u009b`, "\u009b", 1),
		strings.Repeat("x", 3*accessReadBuf), // longer than a read
	}
	var in bytes.Buffer
	for i := 0; i < 100; i++ {
		in.WriteString(goodJSON + "\n")
		in.WriteString(forged[i%len(forged)] + "\n")
	}
	in.WriteString(goodJSON) // no end: the worker died mid-line
	// Written in pieces that cut lines anywhere.
	b := in.Bytes()
	for len(b) > 0 {
		n := min(len(b), 777)
		if _, err := w.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	w.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not end within 10 s of the pipe's close")
	}
	got, _ := os.ReadFile(path)
	if want := strings.Repeat(goodJSON+"\n", 100); string(got) != want {
		t.Errorf("the log holds %d bytes, want the 100 good lines (%d bytes); first 300: %q", len(got), len(want), got[:min(len(got), 300)])
	}
	if n := k.rejected.Load(); n != 101 {
		t.Errorf("%d lines rejected, want 101", n)
	}
	if !strings.Contains(logs.String(), "not access lines") {
		t.Errorf("no warning of the rejected lines: %s", logs.String())
	}
}

// On a stream (standard error) lines are written whole, at most
// streamChunk a write, so that they cannot interleave with the
// supervisor's own log lines. A SEQPACKET pair shows each write.
func TestAccessSinkStreamChunks(t *testing.T) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := os.NewFile(uintptr(p[0]), "r")
	defer r.Close()
	k := NewSink(hclog.NewNullLogger())
	k.Set(p[1])
	lines := strings.Repeat(goodJSON+"\n", 100)
	go func() {
		k.writeLines([]byte(lines), 3, JSON)
		k.Close()
	}()
	var got strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Read(buf)
		if n == 0 || err != nil {
			break
		}
		if n > streamChunk || buf[n-1] != '\n' {
			t.Fatalf("a write of %d bytes, or one ending mid-line", n)
		}
		got.Write(buf[:n])
	}
	if got.String() != lines {
		t.Fatalf("read %d bytes, want %d", got.Len(), len(lines))
	}
}

// A reopen while relays write loses no line: every line is in the old file
// or the new one.
func TestAccessSinkReopenLosesNoLine(t *testing.T) {
	dir := t.TempDir()
	open := func() int {
		fd, err := unix.Open(filepath.Join(dir, "access.log"), unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	k := NewSink(hclog.NewNullLogger())
	k.Set(open())
	var wg sync.WaitGroup
	const writers, perWriter = 4, 2000
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < perWriter; j++ {
				k.writeLines([]byte(goodJSON+"\n"), 3, JSON)
			}
		}()
	}
	for r := 1; r <= 5; r++ {
		time.Sleep(2 * time.Millisecond)
		os.Rename(filepath.Join(dir, "access.log"), filepath.Join(dir, "access.log."+string(rune('0'+r))))
		k.Set(open())
	}
	wg.Wait()
	k.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "access.log*"))
	total := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		total += strings.Count(string(b), goodJSON+"\n")
	}
	if total != writers*perWriter {
		t.Fatalf("%d lines in %d files, want %d", total, len(files), writers*perWriter)
	}
}
