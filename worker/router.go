package worker

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/gatehouse-dev/gatehouse/config"
)

// router picks the route with the longest matching prefix. A prefix matches
// a path equal to it or continuing it at a "/" boundary, so "/healthz" does
// not serve "/healthzX".
type router struct {
	routes []route // longest prefix first; immutable
}

type route struct {
	prefix  string
	handler http.Handler
	// maxUpload raises the body cap for an authorized request (0: none).
	maxUpload int64
	tokens    [][32]byte // SHA-256 of the accepted bearer tokens
}

func newRouter(w *Worker, cfg *config.Config, roots map[string]*os.Root) (*router, error) {
	rt := &router{}
	for _, r := range cfg.Routes {
		var h http.Handler
		switch {
		case r.Static != nil:
			root := roots[r.Static.Root]
			if root == nil {
				return nil, fmt.Errorf("route %q: document root %s was not opened before the sandbox", r.Prefix, r.Static.Root)
			}
			h = newStatic(r.Prefix, root, r.Static)
		case r.Respond != nil:
			h = newRespond(r.Respond)
		case r.Proxy != nil:
			up := cfg.Upstream(r.Proxy.Upstream)
			if up == nil {
				return nil, fmt.Errorf("route %q: no upstream %q", r.Prefix, r.Proxy.Upstream)
			}
			h = w.newProxy(up)
		case r.Metrics != nil:
			h = w.newMetrics(r.Metrics)
		case r.Embedded != nil:
			if h = w.opts.Handlers[r.Embedded.Name]; h == nil {
				return nil, fmt.Errorf("route %q: this program has no handler %q", r.Prefix, r.Embedded.Name)
			}
		default:
			return nil, fmt.Errorf("route %q has no handler", r.Prefix)
		}
		rt.routes = append(rt.routes, route{prefix: r.Prefix, handler: h, maxUpload: r.MaxUploadBytes, tokens: r.UploadTokenSHA256})
	}
	sort.SliceStable(rt.routes, func(i, j int) bool { return len(rt.routes[i].prefix) > len(rt.routes[j].prefix) })
	return rt, nil
}

// knownMethods are the methods of RFC 9110 §9; any other is 501.
var knownMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"OPTIONS": true, "TRACE": true, "PATCH": true,
}

// match returns the route for path, or nil.
func (rt *router) match(path string) *route {
	for i := range rt.routes {
		if matchPrefix(rt.routes[i].prefix, path) {
			return &rt.routes[i]
		}
	}
	return nil
}

// serve runs the handler of route rr (nil: no route matched).
func serve(rr *route, w http.ResponseWriter, r *http.Request) {
	switch {
	case !knownMethods[r.Method]:
		http.Error(w, "method not implemented", http.StatusNotImplemented)
	case rr == nil:
		http.NotFound(w, r)
	default:
		rr.handler.ServeHTTP(w, r)
	}
}

func matchPrefix(prefix, p string) bool {
	if !strings.HasPrefix(p, prefix) {
		return false
	}
	return len(p) == len(prefix) || strings.HasSuffix(prefix, "/") || p[len(prefix)] == '/'
}

// newStatic serves files under root with net/http's FileServer (Range,
// If-Modified-Since, Last-Modified, Content-Type) with the route prefix
// stripped. Directories without an index file are 404 unless listing is on.
func newStatic(prefix string, root *os.Root, cfg *config.Static) http.Handler {
	fsys := noListing{fs: root.FS(), listing: cfg.Listing, index: cfg.Index}
	fileServer := http.StripPrefix(strings.TrimSuffix(prefix, "/"), http.FileServer(http.FS(fsys)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}

// noListing hides directories that have no index file, so FileServer never
// lists them, and presents a configured index file as index.html, the name
// FileServer looks for.
type noListing struct {
	fs      fs.FS
	listing bool
	index   string
}

func (n noListing) Open(name string) (fs.File, error) {
	if n.index != "index.html" && path.Base(name) == "index.html" {
		name = path.Join(path.Dir(name), n.index)
	}
	f, err := n.fs.Open(name)
	if err != nil || n.listing {
		return f, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.IsDir() {
		idx, err := n.fs.Open(path.Join(name, n.index))
		if err != nil {
			f.Close()
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fs.ErrNotExist
			}
			return nil, err
		}
		idx.Close()
	}
	return f, nil
}

// newRespond answers every request with a fixed status and body, after
// reading the request body (under the transport's caps and rate), so that a
// client is answered only once it has sent its request.
func newRespond(cfg *config.Respond) http.Handler {
	body := []byte(cfg.Body)
	ctype := cfg.ContentType
	length := strconv.Itoa(len(body))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return // the transport answers 408/413/400 for its own errors
		}
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Length", length)
		w.WriteHeader(cfg.Status)
		w.Write(body)
	})
}
