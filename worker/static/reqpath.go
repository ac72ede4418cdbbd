package static

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// Linux's limits on a path name and on one of its components; a longer name
// can only be missing.
const (
	maxName      = 4095
	maxComponent = 255
)

// resolvePath turns a decoded request path, with the route prefix stripped,
// into a name relative to the document root ("." for the root itself).
// dir reports that the path names a directory explicitly (a trailing "/",
// "/." or "/.."). status is non-zero when the path cannot name a file: 400
// for a NUL, invalid UTF-8 or ".." above the root (as nginx refuses it), 404
// for a name over the kernel's limits.
func resolvePath(p string) (name string, dir bool, status int) {
	if strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
		return "", false, http.StatusBadRequest
	}
	var segs []string
	last := ""
	for seg := range strings.SplitSeq(p, "/") {
		last = seg
		switch seg {
		case "", ".":
		case "..":
			if len(segs) == 0 {
				return "", false, http.StatusBadRequest
			}
			segs = segs[:len(segs)-1]
		default:
			if len(seg) > maxComponent {
				return "", false, http.StatusNotFound
			}
			segs = append(segs, seg)
		}
	}
	dir = last == "" && p != "" || last == "." || last == ".."
	if len(segs) == 0 {
		return ".", dir, 0
	}
	name = strings.Join(segs, "/")
	if len(name) > maxName {
		return "", false, http.StatusNotFound
	}
	return name, dir, 0
}
