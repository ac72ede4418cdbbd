package httphead

import (
	"bufio"
	"strings"
	"testing"
)

// browserGET is a typical head sent by a desktop browser.
const browserGET = "GET /static/app.js?v=3 HTTP/1.1\r\n" +
	"Host: www.example.com\r\n" +
	"Connection: keep-alive\r\n" +
	"sec-ch-ua: \"Chromium\";v=\"124\", \"Google Chrome\";v=\"124\", \"Not-A.Brand\";v=\"99\"\r\n" +
	"sec-ch-ua-mobile: ?0\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36\r\n" +
	"sec-ch-ua-platform: \"Linux\"\r\n" +
	"Accept: */*\r\n" +
	"Sec-Fetch-Site: same-origin\r\n" +
	"Sec-Fetch-Mode: no-cors\r\n" +
	"Sec-Fetch-Dest: script\r\n" +
	"Referer: https://www.example.com/\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Accept-Language: en-US,en;q=0.9\r\n" +
	"Cookie: session=0123456789abcdef; theme=dark\r\n" +
	"\r\n"

func BenchmarkReadHead(b *testing.B) {
	sr := strings.NewReader(browserGET)
	br := bufio.NewReaderSize(sr, 16<<10)
	b.SetBytes(int64(len(browserGET)))
	b.ReportAllocs()
	for b.Loop() {
		sr.Reset(browserGET)
		br.Reset(sr)
		if _, err := ReadHead(br, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChunked(b *testing.B) {
	body := strings.Repeat("1000\r\n"+strings.Repeat("x", 0x1000)+"\r\n", 16) + "0\r\n\r\n"
	sr := strings.NewReader(body)
	br := bufio.NewReaderSize(sr, 16<<10)
	buf := make([]byte, 32<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		sr.Reset(body)
		br.Reset(sr)
		cr := NewChunkedReader(br, Limits{})
		for {
			if _, err := cr.Read(buf); err != nil {
				break
			}
		}
	}
}
