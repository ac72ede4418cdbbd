package static

import (
	"bytes"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
)

// htmlEscape escapes the five characters HTML needs escaped, as net/http
// does.
var htmlEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace

// serveListing lists directory d in the same markup as net/http's
// FileServer, with Last-Modified, If-Modified-Since and Content-Length.
func (h *Handler) serveListing(w http.ResponseWriter, r *http.Request, d *os.File) {
	fi, err := d.Stat()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var b bytes.Buffer
	b.WriteString("<!doctype html>\n<meta name=\"viewport\" content=\"width=device-width\">\n<pre>\n")
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		// url.URL escapes '?' and '#' so they stay part of the path.
		b.WriteString("<a href=\"" + (&url.URL{Path: n}).String() + "\">" + htmlEscape(n) + "</a>\n")
	}
	b.WriteString("</pre>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	http.ServeContent(w, r, "", fi.ModTime(), bytes.NewReader(b.Bytes()))
}
