package worker

import (
	"net/http"
	"strings"

	"github.com/gatehouse-dev/gatehouse/worker/httphead"
)

// Trailer fields (RFC 9110 §6.5). A handler announces them in the Trailer
// header before its first write and sets their values in Header() once the
// body is written, or sets "Trailer:"-prefixed names (http.TrailerPrefix)
// at any time, as net/http's server allows.

// clientAcceptsTrailers reports whether the request's TE field lists
// "trailers" (RFC 9110 §10.1.4).
func clientAcceptsTrailers(req *http.Request) bool {
	for _, v := range req.Header.Values("Te") {
		for _, t := range strings.Split(v, ",") {
			if t, _, _ := strings.Cut(t, ";"); strings.EqualFold(strings.TrimSpace(t), "trailers") {
				return true
			}
		}
	}
	return false
}

// forbiddenTrailer reports whether a field must never be sent as a trailer:
// the ones that frame, route or authenticate the message (RFC 9110 §6.5.1).
func forbiddenTrailer(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Content-Length", "Transfer-Encoding", "Trailer", "Connection", "Keep-Alive",
		"Host", "Content-Type", "Content-Encoding", "Content-Range", "Te",
		"Cache-Control", "Expires", "Authorization", "Set-Cookie", "Www-Authenticate":
		return true
	}
	return false
}

// writeTrailers writes the announced and prefixed trailer fields after the
// last chunk, dropping invalid and forbidden ones.
func (r *response) writeTrailers() {
	bw := r.cs.bw
	put := func(name string, values []string) {
		if forbiddenTrailer(name) || !httphead.ValidFieldName(name) {
			return
		}
		for _, v := range values {
			if httphead.ValidFieldValue(v) {
				bw.WriteString(name)
				bw.WriteString(": ")
				bw.WriteString(v)
				bw.WriteString("\r\n")
			}
		}
	}
	for _, v := range r.header.Values("Trailer") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				put(http.CanonicalHeaderKey(name), r.header.Values(name))
			}
		}
	}
	for k, vs := range r.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			put(http.CanonicalHeaderKey(name), vs)
		}
	}
}
