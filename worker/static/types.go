package static

import (
	"path"
	"strings"
)

// types maps a lower-case file extension to its Content-Type. It is built in
// because a sandboxed worker cannot read /etc/mime.types, and because a
// machine's table must not change what a site serves. Where Go's mime
// package has a built-in entry the value is the same, so gatehouse and
// net/http agree on those.
var types = map[string]string{
	// Documents and code.
	".html":        "text/html; charset=utf-8",
	".htm":         "text/html; charset=utf-8",
	".xhtml":       "application/xhtml+xml",
	".css":         "text/css; charset=utf-8",
	".js":          "text/javascript; charset=utf-8",
	".mjs":         "text/javascript; charset=utf-8",
	".json":        "application/json",
	".map":         "application/json",
	".jsonld":      "application/ld+json",
	".webmanifest": "application/manifest+json",
	".xml":         "text/xml; charset=utf-8",
	".rss":         "application/rss+xml",
	".atom":        "application/atom+xml",
	".txt":         "text/plain; charset=utf-8",
	".md":          "text/markdown; charset=utf-8",
	".csv":         "text/csv; charset=utf-8",
	".ics":         "text/calendar; charset=utf-8",
	".vtt":         "text/vtt; charset=utf-8",
	".pdf":         "application/pdf",
	".rtf":         "application/rtf",
	".epub":        "application/epub+zip",
	".wasm":        "application/wasm",

	// Images.
	".avif": "image/avif",
	".apng": "image/apng",
	".bmp":  "image/bmp",
	".gif":  "image/gif",
	".ico":  "image/x-icon",
	".jpeg": "image/jpeg",
	".jpg":  "image/jpeg",
	".jxl":  "image/jxl",
	".png":  "image/png",
	".svg":  "image/svg+xml",
	".tif":  "image/tiff",
	".tiff": "image/tiff",
	".webp": "image/webp",

	// Fonts.
	".woff2": "font/woff2",
	".woff":  "font/woff",
	".ttf":   "font/ttf",
	".otf":   "font/otf",
	".eot":   "application/vnd.ms-fontobject",

	// Audio and video.
	".mp3":  "audio/mpeg",
	".m4a":  "audio/mp4",
	".ogg":  "audio/ogg",
	".oga":  "audio/ogg",
	".opus": "audio/ogg",
	".wav":  "audio/wav",
	".flac": "audio/flac",
	".mp4":  "video/mp4",
	".m4v":  "video/mp4",
	".ogv":  "video/ogg",
	".webm": "video/webm",

	// Archives.
	".zip": "application/zip",
	".gz":  "application/gzip",
	".tar": "application/x-tar",
	".bz2": "application/x-bzip2",
	".xz":  "application/x-xz",
	".7z":  "application/x-7z-compressed",
}

// TypeByName returns the Content-Type for a file named name, or def when its
// extension is not in the built-in table. The content is never looked at.
func TypeByName(name, def string) string {
	if t, ok := types[strings.ToLower(path.Ext(name))]; ok {
		return t
	}
	return def
}
