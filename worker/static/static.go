package static

import (
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/hashicorp/go-hclog"
)

// Handler serves the files below one document root. It is safe for
// concurrent use; every field is immutable after New.
type Handler struct {
	root   *os.Root // shared with other routes on the same root; never closed here
	prefix string   // the route prefix without its trailing "/"
	cfg    config.Static
	log    hclog.Logger
}

// New returns a Handler for the route prefix, serving root as cfg says. The
// caller keeps ownership of root and must keep it open while the handler is
// in use.
func New(prefix string, root *os.Root, cfg *config.Static, log hclog.Logger) *Handler {
	return &Handler{root: root, prefix: strings.TrimSuffix(prefix, "/"), cfg: *cfg, log: log}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name, dir, status := resolvePath(strings.TrimPrefix(r.URL.Path, h.prefix))
	switch status {
	case 0:
	case http.StatusNotFound:
		h.missing(w, r)
		return
	default:
		errorPage(w, status)
		return
	}
	// O_NONBLOCK: opening a FIFO someone left in the root must not wait
	// for a writer; only directories and regular files are served.
	f, err := h.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	switch {
	case fi.IsDir() && !dir:
		// Before any index or listing, so relative links resolve below
		// the directory.
		h.redirectToDir(w, r, name)
	case fi.IsDir():
		h.serveDir(w, r, name, f)
	case dir || !fi.Mode().IsRegular():
		h.missing(w, r)
	default:
		h.serveFile(w, r, name, f, fi)
	}
}

// redirectToDir answers 301 with the directory's path and a trailing "/",
// built from the resolved name so that it is always a path on this server
// (never "//host").
func (h *Handler) redirectToDir(w http.ResponseWriter, r *http.Request, name string) {
	p := h.prefix + "/"
	if name != "." {
		p += name + "/"
	}
	loc := (&url.URL{Path: p}).EscapedPath()
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	w.Header().Set("Location", loc)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusMovedPermanently)
	if r.Method == http.MethodGet {
		w.Write([]byte("<a href=\"" + htmlEscape(loc) + "\">Moved Permanently</a>.\n"))
	}
}

// serveDir serves the directory's index file, else its listing when enabled,
// else 403 (as nginx does for a directory without an index).
func (h *Handler) serveDir(w http.ResponseWriter, r *http.Request, name string, d *os.File) {
	idxName := path.Join(name, h.cfg.Index)
	idx, err := h.root.OpenFile(idxName, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err == nil {
		defer idx.Close()
		fi, err := idx.Stat()
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if fi.Mode().IsRegular() {
			h.serveFile(w, r, idxName, idx, fi)
			return
		}
	} else if statusOf(err) != http.StatusNotFound {
		h.fail(w, r, err)
		return
	}
	if !h.cfg.Listing {
		errorPage(w, http.StatusForbidden)
		return
	}
	h.serveListing(w, r, d)
}

// serveFile serves the regular file f, named name below the root, or its
// precompressed sibling.
func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request, name string, f *os.File, fi fs.FileInfo) {
	hdr := w.Header()
	content, cfi, coding := f, fi, ""
	if h.cfg.Precompressed {
		sib, sfi, c, vary := h.sibling(r, name)
		if vary {
			hdr.Add("Vary", "Accept-Encoding")
		}
		if sib != nil {
			defer sib.Close()
			content, cfi, coding = sib, sfi, c
		}
	}
	hdr.Set("Content-Type", TypeByName(name, h.cfg.DefaultType))
	hdr.Set("Etag", etag(cfi, coding))
	if rh := r.Header.Get("Range"); rh != "" {
		nr := ""
		if h.cfg.MaxRanges > 0 {
			nr = normalizeRange(rh, cfi.Size(), h.cfg.MaxRanges)
		}
		if nr != rh {
			r = r.Clone(r.Context())
			if nr == "" {
				r.Header.Del("Range")
			} else {
				r.Header.Set("Range", nr)
			}
		}
	}
	http.ServeContent(representation{w, coding, h.cfg.MaxRanges == 0}, r, name, cfi.ModTime(), content)
}

// sibling opens the precompressed sibling of name (NAME.br, NAME.gz) the
// client weighs highest, if any. vary reports whether any sibling exists, so
// the response depends on Accept-Encoding whether or not one is chosen.
func (h *Handler) sibling(r *http.Request, name string) (f *os.File, fi fs.FileInfo, coding string, vary bool) {
	accept := r.Header.Get("Accept-Encoding")
	bestQ := 0
	best := ""
	for _, c := range codings {
		st, err := h.root.Stat(name + c.suffix)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		vary = true
		if q := acceptQuality(accept, c.name); q > bestQ {
			bestQ, best, coding = q, name+c.suffix, c.name
		}
	}
	if best == "" {
		return nil, nil, "", vary
	}
	f, err := h.root.OpenFile(best, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, "", vary
	}
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, "", vary
	}
	return f, fi, coding, vary
}

// etag is a strong validator (RFC 9110 §8.8.3) of one representation: its
// modification time in nanoseconds and its size, as nginx's is of seconds
// and size, and its coding so that two representations never share one.
func etag(fi fs.FileInfo, coding string) string {
	t := `"` + strconv.FormatInt(fi.ModTime().UnixNano(), 16) + "-" + strconv.FormatInt(fi.Size(), 16)
	if coding != "" {
		t += "-" + coding
	}
	return t + `"`
}

// representation passes ServeContent's response through, naming the coding
// of a precompressed representation only on a 200 or 206: set earlier,
// ServeContent would leave out the Content-Length.
type representation struct {
	http.ResponseWriter
	coding   string
	noRanges bool // max_ranges = 0: ranges are not offered
}

func (w representation) WriteHeader(code int) {
	h := w.Header()
	if w.coding != "" && (code == http.StatusOK || code == http.StatusPartialContent) {
		h.Set("Content-Encoding", w.coding)
	}
	if w.noRanges {
		h.Del("Accept-Ranges")
	}
	w.ResponseWriter.WriteHeader(code)
}

// ReadFrom passes a file body to the underlying writer's ReadFrom, so that
// it can use sendfile(2).
func (w representation) ReadFrom(src io.Reader) (int64, error) {
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{w}, src)
}

// fail answers an error from opening or reading a name below the root.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	switch status {
	case http.StatusInternalServerError:
		h.log.Error("serving a static file", "path", r.URL.Path, "error", err)
	case http.StatusNotFound:
		h.missing(w, r)
		return
	}
	errorPage(w, status)
}

// missing answers a path that names no file: with the fallback file and
// 200 when the route has one (nginx's try_files, for a single-page
// application whose paths are its own), else 404.
func (h *Handler) missing(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Fallback == "" {
		errorPage(w, http.StatusNotFound)
		return
	}
	f, err := h.root.OpenFile(h.cfg.Fallback, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		h.log.Warn("static fallback unavailable", "fallback", h.cfg.Fallback, "error", err)
		errorPage(w, http.StatusNotFound)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		h.log.Warn("static fallback is not a regular file", "fallback", h.cfg.Fallback)
		errorPage(w, http.StatusNotFound)
		return
	}
	h.serveFile(w, r, h.cfg.Fallback, f, fi)
}

// statusOf maps an error from the root to a status. What a request names
// decides 400/403/404; only a failing file system is a 500.
func statusOf(err error) int {
	var pe *fs.PathError
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENAMETOOLONG):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ELOOP):
		return http.StatusForbidden
	case errors.As(err, &pe) && !errors.As(pe.Err, &errno):
		// Not an errno: os.Root refused the name itself, a symlink
		// that leads out of the root.
		return http.StatusForbidden
	}
	return http.StatusInternalServerError
}

// errorPage answers status with the same short text body net/http's
// FileServer sends.
func errorPage(w http.ResponseWriter, status int) {
	text := strconv.Itoa(status) + " " + http.StatusText(status)
	if status == http.StatusNotFound {
		text = "404 page not found"
	}
	http.Error(w, text, status)
}
