package site

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"

	"github.com/gatehouse-dev/gatehouse/config"
	"github.com/gatehouse-dev/gatehouse/worker/static"
	"github.com/hashicorp/go-hclog"
)

// Error pages (issue 30): a configured file replaces gatehouse's own text
// for an error status, whichever part of the worker answered it, and, for
// the statuses the operator asked, a proxied upstream's response. The
// status is kept; the page's Content-Type comes from its name, as a static
// file's does. The file is read through a document root on each use, so an
// edit shows at once, as with nginx's error_page.

// errorPage is one status's page. Immutable.
type errorPage struct {
	root     *os.Root
	name     string // under root
	ctype    string
	upstream bool // also replaces an upstream's response (upstream_errors)
}

// ErrorPages are the pages of a route, or of requests no route matched, by
// status; nil when there are none. Immutable.
type ErrorPages map[int]*errorPage

// NewErrorPages builds the pages of a scope: global's, then own's for the
// statuses they name. A page whose root the worker could not open is left
// out (its text answers instead), logged once here.
func NewErrorPages(log hclog.Logger, global, own []config.ErrorPage, roots map[string]*os.Root) ErrorPages {
	var pages ErrorPages
	for _, set := range [][]config.ErrorPage{global, own} {
		for _, p := range set {
			root := roots[p.Root]
			if root == nil {
				log.Warn("error page unavailable: its directory did not open", "file", p.File)
				continue
			}
			if pages == nil {
				pages = ErrorPages{}
			}
			ep := &errorPage{root: root, name: p.Name(), ctype: static.TypeByName(p.File, "application/octet-stream"), upstream: p.UpstreamErrors}
			for _, s := range p.Statuses {
				pages[s] = ep
			}
		}
	}
	return pages
}

// read returns the page's bytes, at most config.MaxErrorPageBytes.
func (p *errorPage) read() ([]byte, error) {
	// O_NONBLOCK as worker/static opens files: without it the os package
	// clears the flag with a fcntl the worker's seccomp filter refuses.
	f, err := p.root.OpenFile(p.name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Size() > config.MaxErrorPageBytes:
		return nil, fmt.Errorf("%d bytes, over %d", fi.Size(), config.MaxErrorPageBytes)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Page returns the body and Content-Type of the page for status, if one is
// configured and readable; a page that fails to read is logged and the
// caller answers with its text.
func (pages ErrorPages) Page(log hclog.Logger, status int) ([]byte, string, bool) {
	p := pages[status]
	if p == nil {
		return nil, "", false
	}
	b, err := p.read()
	if err != nil {
		log.Warn("error page unreadable; answering with text", "status", status, "page", p.name, "error", err)
		return nil, "", false
	}
	return b, p.ctype, true
}

// upstreamPageKeeps are the fields of an upstream's error response kept
// when its page replaces it: what a client needs to act on the status.
var upstreamPageKeeps = []string{"Www-Authenticate", "Retry-After", "Allow"}

// InterceptUpstream replaces res, an upstream's response, by its status's
// page when the route asked for it (upstream_errors), as nginx's
// proxy_intercept_errors: the status is kept, the upstream's body and its
// other fields are dropped. Otherwise res is left alone.
func (pages ErrorPages) InterceptUpstream(log hclog.Logger, res *http.Response) {
	p := pages[res.StatusCode]
	if p == nil || !p.upstream {
		return
	}
	b, ctype, ok := pages.Page(log, res.StatusCode)
	if !ok {
		return
	}
	h := http.Header{"Content-Type": {ctype}, "Content-Length": {strconv.Itoa(len(b))}}
	for _, k := range upstreamPageKeeps {
		if v := res.Header[k]; v != nil {
			h[k] = v
		}
	}
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(b))
	res.ContentLength = int64(len(b))
	res.Header, res.Trailer = h, nil
}
