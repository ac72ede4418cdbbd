package supervisor

import "testing"

func TestClosingHead(t *testing.T) {
	for _, tc := range []struct {
		head string
		want bool
	}{
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\nconnection:Keep-Alive, CLOSE\r\n\r\n", true},
		{"\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\n", true},
		{"GET / HTTP/1.0\r\nHost: x\r\n\r\n", true},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", false},
		{"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nHost: x\r\nConnection: closed\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nX-Connection: close\r\n\r\n", false},
		// A body may follow: the worker may linger.
		{"POST / HTTP/1.1\r\nConnection: close\r\nContent-Length: 3\r\n\r\n", false},
		{"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		// Bytes after the head: a pipelined request despite the close.
		{"GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n", false},
		// A folded line, a line without a colon: the worker's to judge.
		{"GET / HTTP/1.1\r\nConnection: close\r\n x\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nConnection close\r\n\r\n", false},
		{"GET / HTTP/1.1\r\nConnection: close\r\n", false},
		{"GET / HTTP/1.0\nHost: x\n\n", true},
	} {
		if got := closingHead([]byte(tc.head)); got != tc.want {
			t.Errorf("closingHead(%q) = %v, want %v", tc.head, got, tc.want)
		}
	}
}
