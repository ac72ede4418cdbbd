package worker

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// bodyLimitConfig has a global cap of 16 bytes, raised to 64 on /big/ and
// lowered to 0 on /none/.
const bodyLimitConfig = `
listener "http" {
  address = "127.0.0.1:0"
}
limits {
  max_body_bytes = 16
}
log {
  access_log = false
}
route "/" {
  respond {}
}
route "/big/" {
  max_body_bytes = 64
  respond {}
}
route "/none/" {
  max_body_bytes = 0
  respond {}
}
`

// TestRouteMaxBodyBytes: a route's max_body_bytes replaces the global cap,
// upwards and downwards; over it the answer is 413.
func TestRouteMaxBodyBytes(t *testing.T) {
	h := startWorkerWith(t, bodyLimitConfig, nil)
	post := func(path string, n int) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(n) + "\r\n\r\n" + strings.Repeat("b", n)
	}
	chunked := func(path string, n int) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(n), 16) + "\r\n" + strings.Repeat("b", n) + "\r\n0\r\n\r\n"
	}
	for _, tc := range []struct {
		name, req string
		status    int
	}{
		{"global cap holds", post("/", 17), http.StatusRequestEntityTooLarge},
		{"global cap fits", post("/", 16), http.StatusOK},
		{"route raises the cap", post("/big/x", 64), http.StatusOK},
		{"over the raised cap", post("/big/x", 65), http.StatusRequestEntityTooLarge},
		{"chunked over the raised cap", chunked("/big/x", 65), http.StatusRequestEntityTooLarge},
		{"chunked within the raised cap", chunked("/big/x", 40), http.StatusOK},
		{"route lowers the cap to none", post("/none/", 1), http.StatusRequestEntityTooLarge},
		{"no body on the lowered route", get("/none/"), http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := h.connect()
			cl.write(t, tc.req)
			waitReadable(t, cl.fd)
			h.dispatch(cl, nil)
			if r := cl.response(t); r.StatusCode != tc.status {
				t.Errorf("status %d, want %d", r.StatusCode, tc.status)
			}
		})
	}
}
