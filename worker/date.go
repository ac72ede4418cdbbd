package worker

import (
	"net/http"
	"sync/atomic"
	"time"
)

// dateCache formats the Date header once per second, not once per response.
type dateCache struct {
	v atomic.Pointer[dateValue]
}

// dateValue is one second's Date value; never changed once stored.
type dateValue struct {
	sec  int64
	text string
}

// now returns the current Date value, in http.TimeFormat.
func (c *dateCache) now() string {
	t := time.Now()
	if d := c.v.Load(); d != nil && d.sec == t.Unix() {
		return d.text
	}
	d := &dateValue{sec: t.Unix(), text: t.UTC().Format(http.TimeFormat)}
	c.v.Store(d)
	return d.text
}
