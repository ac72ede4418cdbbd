package accesslog

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

func testEntry() Entry {
	return Entry{
		End: time.Date(2026, 12, 1, 1, 2, 3, 456e6, time.UTC), Dur: 1234567 * time.Nanosecond,
		Method: "GET", Path: "/a b\"c\\\n\x00é\xff", Proto: "HTTP/1.1", Status: 200, Bytes: 104857600,
		Client: "127.0.0.2", Host: "Site.Example:8443", Referer: "https://r.example/x", Agent: "curl/8", WorkerID: 3,
	}
}

// The JSON line: fields in a fixed order, integers as integers, every odd
// byte escaped so that the line stays one valid JSON object.
func TestAccessJSONLine(t *testing.T) {
	e := testEntry()
	got := string(appendJSON(nil, &e))
	want := `{"time":"2026-12-01T01:02:03.456Z","worker":3,"client":"127.0.0.2","host":"site.example","method":"GET",` +
		`"path":"/a b\"c\\\u000a\u0000é\ufffd","proto":"HTTP/1.1","status":200,"bytes":104857600,` +
		`"duration_us":1234,"referer":"https://r.example/x","user_agent":"curl/8"}` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
}

// The combined format, as nginx writes it, with nginx's escaping.
func TestAccessCombinedLine(t *testing.T) {
	e := testEntry()
	e.Referer, e.Bytes = "", 0
	got := string(appendCombined(nil, &e))
	want := `127.0.0.2 - - [01/Dec/2026:01:02:03 +0000] "GET /a b\x22c\x5c\x0a\x00\xc3\xa9\xff HTTP/1.1" 200 0 "-" "curl/8"` + "\n"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// C1 controls (U+0080–U+009F) are escaped in both formats: U+009B is CSI,
// which a terminal obeys as ESC [. A path "%C2%9B" decodes to it.
func TestAccessLineEscapesC1(t *testing.T) {
	e := testEntry()
	e.Path, e.Agent = "/\u0080x\u009b2J\u009fé", "a\u0085b"
	j := string(appendJSON(nil, &e))
	if !strings.Contains(j, `"path":"/\u0080x\u009b2J\u009fé"`) || !strings.Contains(j, `"user_agent":"a\u0085b"`) {
		t.Errorf("JSON: %s", j)
	}
	c := string(appendCombined(nil, &e))
	if !strings.Contains(c, `"GET /\xc2\x80x\xc2\x9b2J\xc2\x9f\xc3\xa9 HTTP/1.1"`) || !strings.Contains(c, `"a\xc2\x85b"`) {
		t.Errorf("combined: %s", c)
	}
	for _, line := range []string{j, c} {
		for _, r := range line {
			if r >= 0x80 && r <= 0x9f || r < 0x20 && r != '\n' || r == 0x7f {
				t.Errorf("control %U in %q", r, line)
			}
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(j), &m); err != nil || m["path"] != e.Path {
		t.Errorf("JSON decodes to %q (%v), want %q", m["path"], err, e.Path)
	}
}

// vhost_combined is combined after the request's host as nginx's $host
// gives it (lower case, without port or brackets), "-" without one, every
// byte that could make the field something else escaped.
func TestAccessVHostCombinedLine(t *testing.T) {
	for host, want := range map[string]string{
		"Site.Example:8443": "site.example", "[::1]:80": "::1", "a.example.": "a.example", "": "-",
		"a b\"<": `a\x20b\x22\x3c`, "é": `\xc3\xa9`, "2026-12-01T01.02Z": "2026-12-01t01.02z",
	} {
		a := New("vhost_combined", false, 1<<20, time.Hour, hclog.NewNullLogger())
		e := testEntry()
		e.Host, e.Path, e.Referer = host, "/p", ""
		a.Add(&e)
		line := string(a.buf)
		if rest, ok := strings.CutPrefix(line, want+" "); !ok || rest != string(appendCombined(nil, &e)) {
			t.Errorf("host %q: %q, want it after %q", host, line, want)
		}
	}
}

// Queries are left out unless access_log_query: they may hold tokens.
func TestAccessLogQueryOption(t *testing.T) {
	for _, tt := range []struct {
		format string
		query  bool
		want   []string
		not    string
	}{
		{"json", false, []string{`"path":"/p","`, `"referer":"https://r.example/x"`}, "t=1"},
		{"combined", false, []string{`"GET /p HTTP/1.1"`, `"https://r.example/x"`}, "t=1"},
		{"json", true, []string{`"path":"/p?t=1&u=%22\"","`, `"referer":"https://r.example/x?r=1"`}, "\x00"},
		{"combined", true, []string{`"GET /p?t=1&u=%22\x22 HTTP/1.1"`, `"https://r.example/x?r=1"`}, "\x00"},
	} {
		a := New(tt.format, tt.query, 1<<20, time.Hour, hclog.NewNullLogger())
		e := testEntry()
		e.Path, e.Query, e.Referer = "/p", `t=1&u=%22"`, "https://r.example/x?r=1"
		a.Add(&e)
		line := string(a.buf)
		for _, w := range tt.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s, query %v: %q lacks %q", tt.format, tt.query, line, w)
			}
		}
		if strings.Contains(line, tt.not) {
			t.Errorf("%s, query %v: %q holds %q", tt.format, tt.query, line, tt.not)
		}
	}
}

// EntryFor takes the request's host, path, query and referer as received;
// what is logged of them is the Log's choice.
func TestEntryFor(t *testing.T) {
	h := &httphead.Head{Method: "GET", Proto: "HTTP/1.1", Host: "A.example:8080", URL: &url.URL{Path: "/a", RawQuery: "t=1"},
		Header: http.Header{"Referer": {"https://r.example/?x=1"}, "User-Agent": {"curl/8"}}}
	e := EntryFor(h)
	if e.Host != "A.example:8080" || e.Path != "/a" || e.Query != "t=1" || e.Referer != "https://r.example/?x=1" || e.Agent != "curl/8" {
		t.Errorf("EntryFor: %+v", e)
	}
	if e := EntryFor(nil); e.Method != "-" || e.Path != "-" || e.Host != "" {
		t.Errorf("EntryFor(nil): %+v", e)
	}
}

func TestStripQuery(t *testing.T) {
	for in, want := range map[string]string{"": "", "/a": "/a", "/a?t=1": "/a", "https://x/p#frag?": "https://x/p"} {
		if got := stripQuery(in); got != want {
			t.Errorf("stripQuery(%q) = %q, want %q", in, got, want)
		}
	}
}

// Lines go out whole, a buffer's worth a write: the pipe is the worker's
// alone, and the supervisor's relay cuts them for its destination. A
// SEQPACKET pair shows each write as it was made. The buffer's bound makes
// lines go out without a flush; the rest go out on flush.
func TestAccessLogPipeWholeLines(t *testing.T) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := os.NewFile(uintptr(p[0]), "r")
	defer r.Close()
	a := New("json", false, 16<<10, time.Hour, hclog.NewNullLogger())
	a.SetOut(os.NewFile(uintptr(p[1]), "w"))
	const n = 1000
	done := make(chan []int)
	go func() {
		var sizes []int
		buf := make([]byte, 1<<20)
		for {
			k, err := r.Read(buf)
			if k > 0 {
				sizes = append(sizes, k)
				if buf[k-1] != '\n' {
					sizes = append(sizes, -1)
				}
			}
			if err != nil || k == 0 {
				done <- sizes
				return
			}
		}
	}()
	e := testEntry()
	for i := 0; i < n; i++ {
		a.Add(&e)
	}
	a.Flush()
	a.mu.Lock()
	left := len(a.buf)
	a.mu.Unlock()
	a.wmu.Lock()
	a.out.Close()
	a.wmu.Unlock()
	sizes := <-done
	total, lines := 0, 0
	line := appendJSON(nil, &e)
	for i, s := range sizes {
		if s < 0 || i < len(sizes)-1 && s < 16<<10 || s > 16<<10+len(line) {
			t.Fatalf("a write of %d bytes, one ending mid-line (-1), or one cut short of the buffer: %v", s, sizes)
		}
		total += s
	}
	lines = total / len(line)
	if left != 0 || lines != n || total%len(line) != 0 {
		t.Fatalf("%d bytes read (%d lines of %d), %d left buffered; want %d lines", total, lines, len(line), left, n)
	}
}

// A line waits in the buffer at most the flush interval: with no other
// line after it, it still reaches the file.
func TestAccessLogFlushesOnTime(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "access")
	if err != nil {
		t.Fatal(err)
	}
	a := New("combined", false, 64<<10, 20*time.Millisecond, hclog.NewNullLogger())
	a.SetOut(f)
	e := testEntry()
	a.Add(&e)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, _ := os.Stat(f.Name())
		if st.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the line was not written within 10 s of a 20 ms flush interval")
		}
	}
	b, _ := os.ReadFile(f.Name())
	if sc := bufio.NewScanner(strings.NewReader(string(b))); !sc.Scan() || !strings.HasPrefix(sc.Text(), "127.0.0.2 - - [") {
		t.Fatalf("file holds %q", b)
	}
}

// Formatting a line into the buffer allocates nothing.
func TestAccessLogAddAllocatesNothing(t *testing.T) {
	a := New("json", false, 1<<20, time.Hour, hclog.NewNullLogger())
	e := testEntry()
	allocs := testing.AllocsPerRun(1000, func() {
		a.Add(&e)
		a.mu.Lock()
		a.buf = a.buf[:0]
		a.mu.Unlock()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per line", allocs)
	}
}

// FuzzAccessJSONString: any string is escaped into valid JSON that decodes
// to the string itself (invalid UTF-8 aside).
func FuzzAccessJSONString(f *testing.F) {
	for _, s := range []string{"", "/a", "\"\\\n\r\t\x00\x7f", "é\xff\xfe", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q → %s: %v", s, b, err)
		}
		var want strings.Builder
		for _, r := range s { // an invalid byte is one U+FFFD
			want.WriteRune(r)
		}
		if got != want.String() {
			t.Fatalf("%q → %q", s, got)
		}
	})
}
