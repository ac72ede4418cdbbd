// Command upstream is the real-traffic phase's application: the one
// upstream every proxy of the bench (gatehouse's proxy route, net/http's
// httputil.ReverseProxy, nginx's proxy_pass) forwards to.
//
//	GET /api/small  a 2 048-byte JSON document
//	GET /api/large  a 204 800-byte JSON document
//	GET /ws         a WebSocket (RFC 6455) echoing every message
//	GET /           "hello, world\n" (the bench's readiness probe)
//
// The documents are generated once at start, deterministic, and served
// from memory with Content-Length, so that the proxies' costs, not the
// application's, make the difference between the rows.
//
//	upstream -addr 127.0.0.1:18101
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gatehouse-dev/gatehouse/scripts/bench/internal/wsframe"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18101", "listen address")
	flag.Parse()
	mux := http.NewServeMux()
	mux.Handle("/api/small", doc(2048))
	mux.Handle("/api/large", doc(204800))
	mux.HandleFunc("/ws", echo)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("hello, world\n"))
	})
	srv := &http.Server{
		Addr:              *addr,
		Handler:           mux,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       300 * time.Second,
		ErrorLog:          log.New(log.Writer(), "upstream: ", log.LstdFlags),
	}
	log.Printf("listening: address=%s", *addr)
	log.Fatal(srv.ListenAndServe())
}

// doc returns a handler answering a JSON array of records of exactly size
// bytes, the shape of an API's list response.
func doc(size int) http.Handler {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := 0; b.Len() < size-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":%d,"name":"item %d","price":%d.%02d,"tags":["a","b"],"in_stock":%t}`,
			i, i, 10+i%90, i%100, i%3 != 0)
	}
	b.WriteString(`],"next":"`)
	b.WriteString(strings.Repeat("x", size-b.Len()-2))
	b.WriteString(`"}`)
	body := b.Bytes()
	length := strconv.Itoa(len(body))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", length)
		w.Write(body)
	})
}

// echo upgrades the request to a WebSocket and sends every data frame back
// as it came, answers a ping with a pong and a close with a close.
func echo(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Sec-WebSocket-Key")
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || key == "" {
		http.Error(w, "websocket upgrade expected", http.StatusBadRequest)
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
		wsframe.Accept(key))
	if err := rw.Flush(); err != nil {
		return
	}
	br := bufio.NewReaderSize(rw.Reader, 64<<10)
	var in, out []byte
	for {
		op, payload, err := wsframe.Read(br, in)
		if err != nil {
			return
		}
		in = payload[:0]
		switch op {
		case wsframe.OpPing:
			op = wsframe.OpPong
		case wsframe.OpClose:
			conn.Write(wsframe.Append(out[:0], wsframe.OpClose, payload, nil))
			return
		case wsframe.OpPong:
			continue
		}
		out = wsframe.Append(out[:0], op, payload, nil)
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}
