package worker

import (
	"net/http"
	"strconv"
	"strings"
)

// setCORS adds the configured CORS headers for a request from origin.
// Transport errors never carry Access-Control-Allow-Credentials: they are
// answered before anything about the request is known (docs/DESIGN.md
// §3.5).
func (w *Worker) setCORS(h http.Header, origin string, transportError bool) {
	c := w.cfg.CORS
	if c == nil || origin == "" || !c.Allows(origin) {
		return
	}
	if h.Get("Access-Control-Allow-Origin") != "" {
		return // the handler decided
	}
	if c.AllowsAnyOrigin() && !c.AllowCredentials {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
	if c.AllowCredentials && !transportError {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if len(c.ExposeHeaders) > 0 {
		h.Set("Access-Control-Expose-Headers", strings.Join(c.ExposeHeaders, ", "))
	}
}

// preflight reports whether r is a CORS preflight this worker answers.
func (w *Worker) preflight(r *http.Request) bool {
	c := w.cfg.CORS
	return c != nil && r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" && c.Allows(r.Header.Get("Origin"))
}

// answerPreflight answers an allowed CORS preflight with 204.
func (w *Worker) answerPreflight(rw http.ResponseWriter, r *http.Request) {
	c := w.cfg.CORS
	h := rw.Header()
	h.Set("Access-Control-Allow-Methods", strings.Join(c.AllowMethods, ", "))
	if len(c.AllowHeaders) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(c.AllowHeaders, ", "))
	}
	h.Set("Access-Control-Max-Age", strconv.Itoa(int(c.MaxAge.Seconds())))
	rw.WriteHeader(http.StatusNoContent)
}
