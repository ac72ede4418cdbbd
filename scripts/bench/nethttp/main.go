// Command nethttp is the benchmark's baseline: a plain Go net/http server
// answering every request with the same 13 bytes gatehouse's bench route
// answers ("hello, world\n"), with GOMAXPROCS left at its default. With
// -cert and -key it serves HTTPS with crypto/tls instead: TLS 1.2 and 1.3,
// HTTP/1.1 only (HTTP/2 off, as gatehouse and the bench's nginx speak only
// HTTP/1.1), session tickets on (crypto/tls's default, as gatehouse's).
//
//	nethttp -addr 127.0.0.1:18082 [-cert cert.pem -key key.pem]
//
// The real-traffic phase runs it as a site instead: -root serves a
// directory with http.FileServer at "/", -upstream forwards "/api/" and
// "/ws" (WebSocket upgrades included) with httputil.ReverseProxy, and
// -tls-addr serves the same over HTTPS beside -addr's plain listener.
//
//	nethttp -addr 127.0.0.1:18108 -root site -upstream 127.0.0.1:18101 \
//	  -tls-addr 127.0.0.1:18109 -cert cert.pem -key key.pem
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18082", "listen address")
	idle := flag.Duration("idle", 300*time.Second, "keep-alive idle timeout")
	cert := flag.String("cert", "", "PEM certificate chain: serve HTTPS")
	key := flag.String("key", "", "PEM private key of -cert")
	root := flag.String("root", "", "serve this directory at / (http.FileServer)")
	upstream := flag.String("upstream", "", "forward /api/ and /ws to this address (httputil.ReverseProxy)")
	tlsAddr := flag.String("tls-addr", "", "with -cert: serve HTTPS here and plain HTTP on -addr")
	flag.Parse()
	body := []byte("hello, world\n")
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(body)
	})
	if *root != "" || *upstream != "" {
		mux := http.NewServeMux()
		if *root != "" {
			h = http.FileServer(http.Dir(*root))
		}
		mux.Handle("/", h)
		if *upstream != "" {
			rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: *upstream})
			// The default transport keeps 2 idle connections per host,
			// which makes a proxy under 64 clients dial for most
			// requests; an operator raises it, as nginx's keepalive.
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 1024
			rp.Transport = t
			mux.Handle("/api/", rp)
			mux.Handle("/ws", rp)
		}
		h = mux
	}
	srv := func(a string) *http.Server {
		return &http.Server{
			Addr:              a,
			Handler:           h,
			ReadHeaderTimeout: 30 * time.Second,
			IdleTimeout:       *idle,
			WriteTimeout:      30 * time.Second,
			ErrorLog:          log.New(log.Writer(), "nethttp: ", log.LstdFlags),
		}
	}
	if *cert == "" {
		log.Printf("listening: address=%s", *addr)
		log.Fatal(srv(*addr).ListenAndServe())
	}
	tlsSrv := srv(*addr)
	if *tlsAddr != "" {
		tlsSrv = srv(*tlsAddr)
		go func() {
			log.Printf("listening: address=%s", *addr)
			log.Fatal(srv(*addr).ListenAndServe())
		}()
	}
	tlsSrv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	tlsSrv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	log.Printf("listening: address=%s tls", tlsSrv.Addr)
	log.Fatal(tlsSrv.ListenAndServeTLS(*cert, *key))
}
