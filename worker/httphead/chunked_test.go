package httphead

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

func TestChunked(t *testing.T) {
	const next = "GET / HTTP/1.1\r\n"
	tests := []struct {
		name string
		in   string // body; next is appended
		want string // decoded body on success
		err  string // errName of the error
	}{
		{"one chunk", "3\r\nabc\r\n0\r\n\r\n", "abc", ""},
		{"empty body", "0\r\n\r\n", "", ""},
		{"several chunks, both hex cases", "a\r\n0123456789\r\nA\r\nabcdefghij\r\n1\r\n!\r\n0\r\n\r\n", "0123456789abcdefghij!", ""},
		{"leading zeros", "0003\r\nabc\r\n000\r\n\r\n", "abc", ""},
		{"16 digits", "0000000000000003\r\nabc\r\n0\r\n\r\n", "abc", ""},
		{"extensions", "3;a;b=c;d=\"x y\\\"z\";e=\"\"\r\nabc\r\n0;last\r\n\r\n", "abc", ""},
		{"trailers", "3\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Other:  v \r\n\r\n", "abc", ""},
		{"CRLF in data", "4\r\n\r\n\r\n\r\n0\r\n\r\n", "\r\n\r\n", ""},

		{"17 digits", "00000000000000003\r\nabc\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"overflow uint64", "10000000000000000\r\n", "", "invalid_chunk_size"},
		{"over int64", "8000000000000000\r\n", "", "invalid_chunk_size"},
		{"max int64 then EOF", "7fffffffffffffff\r\nabc", "abc" + next, "unexpected EOF"},
		{"0x prefix", "0x1\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"minus sign", "-1\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"plus sign", "+1\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"leading space", " 1\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"trailing space", "1 \r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"space before ext", "1 ;ext\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"HTAB before ext", "1\t;ext\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"empty size", "\r\na\r\n0\r\n\r\n", "", "invalid_chunk_size"},
		{"non-hex", "g\r\n", "", "invalid_chunk_size"},
		{"space after semicolon", "1; a\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"empty ext name", "1;\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"empty ext value", "1;a=\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"space before =", "1;a =b\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"unterminated quoted", "1;a=\"b\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"junk after quoted", "1;a=\"b\"c\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"CTL in quoted", "1;a=\"\x01\"\r\na\r\n0\r\n\r\n", "", "invalid_chunk_ext"},
		{"huge extension", "1;a=" + strings.Repeat("b", 5000) + "\r\na\r\n0\r\n\r\n", "", "chunk_ext_too_long"},
		{"huge size", strings.Repeat("1", 5000) + "\r\n", "", "invalid_chunk_size"},
		{"extension at cap", "1;a=" + strings.Repeat("b", maxChunkLine-6) + "\r\na\r\n0\r\n\r\n", "a", ""},
		{"extension one past cap", "1;a=" + strings.Repeat("b", maxChunkLine-5) + "\r\na\r\n0\r\n\r\n", "", "chunk_ext_too_long"},
		{"extension spam", strings.Repeat("1;a="+strings.Repeat("b", 4000)+"\r\nx\r\n", 5) + "0\r\n\r\n", "xxxx", "excessive_chunk_overhead"},
		{"missing CRLF after data", "3\r\nabcX\r\n0\r\n\r\n", "abc", "invalid_chunk"},
		{"LF only after data", "3\r\nabc\n0\r\n\r\n", "abc", "invalid_chunk"},
		{"data longer than size", "3\r\nabcd\r\n0\r\n\r\n", "abc", "invalid_chunk"},
		{"bare LF in size line", "3\nabc\r\n0\r\n\r\n", "", "bare_lf"},
		{"bare CR in size line", "3\r;a\r\nabc\r\n0\r\n\r\n", "", "bare_cr"},
		{"NUL in size line", "3;\x00\r\nabc\r\n0\r\n\r\n", "", "nul_byte"},
		{"trailer Content-Length", "0\r\nContent-Length: 5\r\n\r\n", "", "forbidden_trailer"},
		{"trailer Transfer-Encoding", "0\r\ntransfer-encoding: chunked\r\n\r\n", "", "forbidden_trailer"},
		{"trailer Host", "0\r\nHOST: x\r\n\r\n", "", "forbidden_trailer"},
		{"trailer Trailer", "0\r\nTrailer: X\r\n\r\n", "", "forbidden_trailer"},
		{"trailer Connection", "0\r\nConnection: close\r\n\r\n", "", "forbidden_trailer"},
		{"trailer space before colon", "0\r\nX : y\r\n\r\n", "", "space_before_colon"},
		{"trailer obs-fold", "0\r\nX: y\r\n z\r\n\r\n", "", "obs_fold"},
		{"trailer bare LF", "0\r\nX: y\n\r\n", "", "bare_lf"},
		{"final bare LF", "0\r\n\n", "", "bare_lf"},
		{"trailer too large", "0\r\nX: " + strings.Repeat("a", DefaultMaxHeaderBytes) + "\r\n\r\n", "", "trailer_too_large"},
		{"trailer at cap", "0\r\nX: " + strings.Repeat("a", DefaultMaxHeaderBytes-5) + "\r\n\r\n", "", ""},
		{"too many trailers", "0\r\n" + strings.Repeat("X: y\r\n", DefaultMaxHeaderLines+1) + "\r\n", "", "too_many_trailers"},
		{"trailers at line cap", "0\r\n" + strings.Repeat("X: y\r\n", DefaultMaxHeaderLines) + "\r\n", "", ""},
	}
	for _, tt := range tests {
		for _, size := range bufSizes {
			for _, readSize := range []int{1, 7, 64 << 10} {
				got, err, rest := decodeChunked(t, tt.in+next, size, readSize)
				if errName(err) != tt.err {
					t.Errorf("%s (bufio %d, reads of %d): got error %q, want %q", tt.name, size, readSize, errName(err), tt.err)
					continue
				}
				if got != tt.want {
					t.Errorf("%s (bufio %d, reads of %d): got body %q, want %q", tt.name, size, readSize, got, tt.want)
				}
				if err == nil && rest != next {
					t.Errorf("%s (bufio %d, reads of %d): left %q unread, want %q", tt.name, size, readSize, rest, next)
				}
			}
		}
	}
}

func TestChunkedEOF(t *testing.T) {
	tests := []string{
		"",
		"3",
		"3\r\n",
		"3\r\nab",
		"3\r\nabc",
		"3\r\nabc\r",
		"3\r\nabc\r\n",
		"3\r\nabc\r\n0\r\n",
		"3\r\nabc\r\n0\r\nX: y\r\n",
		"3\r\nabc\r\n0\r\n\r",
	}
	for _, in := range tests {
		for _, size := range bufSizes {
			_, err, _ := decodeChunked(t, in, size, 1024)
			if err != io.ErrUnexpectedEOF {
				t.Errorf("%q (bufio %d): got %v, want io.ErrUnexpectedEOF", in, size, err)
			}
		}
	}
}

// TestChunkedExactConsumption checks that the decoder takes nothing from
// the connection beyond the body, not even into the bufio buffer, when the
// body ends at a read boundary.
func TestChunkedExactConsumption(t *testing.T) {
	body := "5\r\nhello\r\n0\r\nX: y\r\n\r\n"
	next := "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
	// A reader that returns the body and the next request in two reads,
	// as two TCP segments would arrive.
	src := &segmentReader{segs: []string{body, next}}
	br := bufio.NewReaderSize(src, 16)
	got, err := io.ReadAll(NewChunkedReader(br, Limits{}))
	if err != nil || string(got) != "hello" {
		t.Fatalf("got %q, %v; want %q", got, err, "hello")
	}
	if br.Buffered() != 0 || len(src.segs) != 1 {
		t.Errorf("read ahead: %d bytes buffered, %d segments left; want 0 and 1", br.Buffered(), len(src.segs))
	}
	h, err := ReadHead(br, Limits{})
	if err != nil || h.Target != "/next" {
		t.Errorf("next head: got %+v, %v", h, err)
	}
}

// segmentReader returns one segment per Read.
type segmentReader struct{ segs []string }

func (s *segmentReader) Read(p []byte) (int, error) {
	if len(s.segs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.segs[0])
	s.segs[0] = s.segs[0][n:]
	if s.segs[0] == "" {
		s.segs = s.segs[1:]
	}
	return n, nil
}

func TestChunkedStickyError(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("zz\r\n3\r\nabc\r\n0\r\n\r\n"))
	cr := NewChunkedReader(br, Limits{})
	buf := make([]byte, 10)
	_, err1 := cr.Read(buf)
	_, err2 := cr.Read(buf)
	var he *Error
	if !errors.As(err1, &he) || he.Code != CodeInvalidChunkSize || he.Status != 400 || err2 != err1 {
		t.Errorf("got %v then %v, want the same invalid_chunk_size error twice", err1, err2)
	}
	if n, err := cr.Read(nil); n != 0 || err != err1 {
		t.Errorf("Read(nil) after error: got %d, %v", n, err)
	}
}

func TestChunkedReadErrorWrapped(t *testing.T) {
	for _, data := range []string{"", "3\r\na", "3\r\nabc\r\n0\r\nX:"} {
		br := bufio.NewReaderSize(&stallReader{data: data, err: timeoutError{}}, 16)
		_, err := io.ReadAll(NewChunkedReader(br, Limits{}))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("after %q: got %v, want an error wrapping a net.Error timeout", data, err)
		}
	}
}

func TestChunkedTrailerLimits(t *testing.T) {
	lim := Limits{MaxHeaderBytes: 20, MaxHeaderLines: 2}
	tests := []struct {
		in   string
		want string
	}{
		{"0\r\nA: 1\r\nB: 2\r\n\r\n", ""},
		{"0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", "too_many_trailers"},
		{"0\r\nA: " + strings.Repeat("x", 15) + "\r\n\r\n", ""},
		{"0\r\nA: " + strings.Repeat("x", 16) + "\r\n\r\n", "trailer_too_large"},
	}
	for _, tt := range tests {
		br := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
		_, err := io.ReadAll(NewChunkedReader(br, lim))
		if got := errName(err); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestChunkedAllocs(t *testing.T) {
	body := strings.Repeat("10;x=y\r\n0123456789abcdef\r\n", 8) + "0\r\n\r\n"
	sr := strings.NewReader(body)
	br := bufio.NewReaderSize(sr, 4096)
	buf := make([]byte, 64)
	cr := &chunkedReader{}
	allocs := testing.AllocsPerRun(100, func() {
		sr.Reset(body)
		br.Reset(sr)
		*cr = chunkedReader{r: br, lim: Limits{}.withDefaults()}
		for {
			if _, err := cr.Read(buf); err != nil {
				if err != io.EOF {
					t.Fatal(err)
				}
				break
			}
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocs per body, want 0", allocs)
	}
}
