package worker

import "net/http"

// allowAsterisk is the Allow value answered to "OPTIONS *": the methods some
// route may serve (static and respond routes serve GET and HEAD, proxy and
// embedded handlers any of these).
const allowAsterisk = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// serverWideOptions reports whether r is "OPTIONS *", a question about the
// server rather than a resource (RFC 9110 §9.3.7), which no route matches.
func serverWideOptions(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.RequestURI == "*"
}

// answerServerOptions answers "OPTIONS *" with 200 and Allow, as nginx and
// Apache do, instead of the 404 of a path no route serves.
func answerServerOptions(rw http.ResponseWriter) {
	rw.Header().Set("Allow", allowAsterisk)
	rw.Header().Set("Content-Length", "0")
	rw.WriteHeader(http.StatusOK)
}
