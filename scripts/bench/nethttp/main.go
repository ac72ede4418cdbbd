// Command nethttp is the benchmark's baseline: a plain Go net/http server
// answering every request with the same 13 bytes gatehouse's bench route
// answers ("hello, world\n"), with GOMAXPROCS left at its default.
//
//	nethttp -addr 127.0.0.1:18082
package main

import (
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18082", "listen address")
	idle := flag.Duration("idle", 300*time.Second, "keep-alive idle timeout")
	flag.Parse()
	body := []byte("hello, world\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(body)
	})
	srv := &http.Server{
		Addr:              *addr,
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       *idle,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          log.New(log.Writer(), "nethttp: ", log.LstdFlags),
	}
	log.Printf("listening: address=%s", *addr)
	log.Fatal(srv.ListenAndServe())
}
