package site

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
)

// SetCORS adds the CORS headers c configures (nil: none) for a request from origin.
// Transport errors never carry Access-Control-Allow-Credentials: they are
// answered before anything about the request is known (docs/DESIGN.md
// §3.5).
func SetCORS(c *config.CORS, h http.Header, origin string, transportError bool) {
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

// Preflight reports whether r is a CORS preflight c allows, answered by
// AnswerPreflight.
func Preflight(c *config.CORS, r *http.Request) bool {
	return c != nil && r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" && c.Allows(r.Header.Get("Origin"))
}

// AnswerPreflight answers a preflight c allows with 204.
func AnswerPreflight(c *config.CORS, rw http.ResponseWriter) {
	h := rw.Header()
	h.Set("Access-Control-Allow-Methods", strings.Join(c.AllowMethods, ", "))
	if len(c.AllowHeaders) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(c.AllowHeaders, ", "))
	}
	h.Set("Access-Control-Max-Age", strconv.Itoa(int(c.MaxAge.Seconds())))
	rw.WriteHeader(http.StatusNoContent)
}
