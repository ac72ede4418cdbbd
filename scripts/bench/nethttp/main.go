// Command nethttp is the benchmark's baseline: a plain Go net/http server
// answering every request with the same 13 bytes gatehouse's bench route
// answers ("hello, world\n"), with GOMAXPROCS left at its default. With
// -cert and -key it serves HTTPS with crypto/tls instead: TLS 1.2 and 1.3,
// HTTP/1.1 only (HTTP/2 off, as gatehouse and the bench's nginx speak only
// HTTP/1.1), session tickets on (crypto/tls's default, as gatehouse's).
//
//	nethttp -addr 127.0.0.1:18082 [-cert cert.pem -key key.pem]
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18082", "listen address")
	idle := flag.Duration("idle", 300*time.Second, "keep-alive idle timeout")
	cert := flag.String("cert", "", "PEM certificate chain: serve HTTPS")
	key := flag.String("key", "", "PEM private key of -cert")
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
	if *cert == "" {
		log.Printf("listening: address=%s", *addr)
		log.Fatal(srv.ListenAndServe())
	}
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	log.Printf("listening: address=%s tls", *addr)
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
