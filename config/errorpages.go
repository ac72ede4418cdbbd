package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/sys/unix"
)

// Error pages (issue 30): a file served in place of gatehouse's short text
// for an error status, and optionally in place of an upstream's response
// (nginx error_page, proxy_intercept_errors). The file's bytes never travel
// in Hello: the workers read it, on each error, through a document root
// the supervisor hands them, as they read static files.

// MaxErrorPageBytes bounds an error page file: it is read whole into
// memory for each response that uses it.
const MaxErrorPageBytes = 1 << 20

// ErrorPage is one `error_page { ... }` block, at the top level (every
// route, and requests no route matches) or in a route (which wins for its
// statuses).
type ErrorPage struct {
	// Statuses are the statuses it answers, 400..599.
	Statuses []int
	// File is the page's absolute, clean path (relative paths resolve
	// against Config.BaseDir).
	File string
	// Root is the directory the workers read File through: the longest
	// static root holding it, else File's own directory, which is then
	// handed to the workers too (Config.ErrorPageRoots).
	Root string
	// UpstreamErrors also replaces a proxied upstream's response with one
	// of Statuses (nginx proxy_intercept_errors); default false: only
	// gatehouse's own errors.
	UpstreamErrors bool
}

// Name is File relative to Root, slash-separated, as os.Root opens it.
func (p *ErrorPage) Name() string {
	rel, _ := filepath.Rel(p.Root, p.File)
	return filepath.ToSlash(rel)
}

var errorPageSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "status", Required: true}, {Name: "file", Required: true}, {Name: "upstream_errors"}},
}

// pageRef is where an error page's file was named, for the checks made
// once every static root is known.
type pageRef struct {
	page *ErrorPage
	rng  hcl.Range
	what string
}

// errorPages decodes the error_page blocks of one scope (owner: "" for
// the top level, else the route's name). A status may appear in one block
// of a scope only.
func (d *decoder) errorPages(blocks hcl.Blocks, owner, base string) []ErrorPage {
	var pages []ErrorPage
	var rngs []hcl.Range
	seen := map[int]hcl.Range{}
	prefix := ""
	if owner != "" {
		prefix = owner + ": "
	}
	for _, b := range blocks.OfType("error_page") {
		attrs := d.attrs(b, errorPageSchema)
		what := prefix + "error_page"
		var p ErrorPage
		ok := true
		if a, found := attrs["status"]; found {
			ok = d.pageStatuses(a, what, seen, &p) && ok
		}
		file, rng, found := stringAttr(d, attrs, "file", what+".file")
		switch {
		case !found:
			ok = false
		case file == "" || strings.ContainsRune(file, 0) || strings.HasSuffix(file, "/"):
			d.errorf(rng, "Invalid value", "%s.file must be the path of a file, got %q.", what, file)
			ok = false
		default:
			p.File = resolve(base, file)
		}
		boolAttr(d, attrs, "upstream_errors", what+".upstream_errors", &p.UpstreamErrors)
		if ok {
			pages = append(pages, p)
			rngs = append(rngs, rng)
		}
	}
	for i := range pages {
		d.pages = append(d.pages, pageRef{page: &pages[i], rng: rngs[i], what: prefix + "error_page.file"})
	}
	return pages
}

// pageStatuses decodes an error_page's status list into p.
func (d *decoder) pageStatuses(a *hcl.Attribute, what string, seen map[int]hcl.Range, p *ErrorPage) bool {
	v, diags := a.Expr.Value(nil)
	d.add(diags)
	if diags.HasErrors() {
		return false
	}
	if t := v.Type(); v.IsNull() || !v.IsWhollyKnown() || v.IsMarked() || !(t.IsTupleType() || t.IsListType()) {
		d.errorf(a.Expr.Range(), "Invalid value", "%s.status must be a list of statuses such as [404, 410].", what)
		return false
	}
	return d.statusValues(v.AsValueSlice(), a, what, seen, p)
}

func (d *decoder) statusValues(vs []cty.Value, a *hcl.Attribute, what string, seen map[int]hcl.Range, p *ErrorPage) bool {
	rng := a.Expr.Range()
	if len(vs) == 0 {
		d.errorf(rng, "Invalid value", "%s.status lists no status.", what)
		return false
	}
	elems, _ := hcl.ExprList(a.Expr)
	ok := true
	for i, v := range vs {
		erng := rng
		if len(elems) == len(vs) {
			erng = elems[i].Range()
		}
		n, isInt := 0, false
		if v.Type() == cty.Number && !v.IsNull() && v.IsKnown() {
			f := v.AsBigFloat()
			if f.IsInt() {
				i64, _ := f.Int64()
				n, isInt = int(i64), true
			}
		}
		switch {
		case !isInt || n < 400 || n > 599:
			got := v.Type().FriendlyName()
			if v.Type() == cty.Number && !v.IsNull() && v.IsKnown() {
				got = formatNumber(v.AsBigFloat())
			}
			d.errorf(erng, "Invalid value", "%s.status entries are error statuses, 400..599, got %s.", what, got)
			ok = false
		case seen[n] != hcl.Range{}:
			d.errorf(erng, "Duplicate error page", "%s: status %d already has a page at %s.", what, n, seen[n])
			ok = false
		default:
			seen[n] = erng
			p.Statuses = append(p.Statuses, n)
		}
	}
	return ok
}

// placeErrorPages gives every error page its root, once the static roots
// are known, and makes the host checks on its file.
func (d *decoder) placeErrorPages(cfg *Config) {
	var roots []string
	for _, r := range cfg.Routes {
		if r.Static != nil {
			roots = append(roots, r.Static.Root)
		}
	}
	for _, ref := range d.pages {
		p := ref.page
		p.Root = filepath.Dir(p.File)
		best := ""
		for _, root := range roots {
			if len(root) > len(best) && (p.File != root && strings.HasPrefix(p.File, strings.TrimSuffix(root, "/")+"/")) {
				best = root
			}
		}
		if best != "" {
			p.Root = best
		}
		if d.host != nil {
			d.checkErrorPage(p, best == "", ref)
		}
	}
}

// checkErrorPage checks that the workers can read p's file, and its root
// when it is a directory of its own (ownRoot).
func (d *decoder) checkErrorPage(p *ErrorPage, ownRoot bool, ref pageRef) {
	if ownRoot && !d.checkRootDir(ref.what+" directory", p.Root, ref.rng) {
		return
	}
	f, err := os.Open(p.File)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		d.errorf(ref.rng, "Invalid error page", "%s %q: %v.", ref.what, p.File, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		d.errorf(ref.rng, "Invalid error page", "%s %q: %v.", ref.what, p.File, err)
	case !fi.Mode().IsRegular():
		d.errorf(ref.rng, "Invalid error page", "%s %q is not a regular file.", ref.what, p.File)
	case fi.Size() > MaxErrorPageBytes:
		d.errorf(ref.rng, "Invalid error page", "%s %q is %d bytes, over the %d an error page may hold (it is read whole for each response).", ref.what, p.File, fi.Size(), MaxErrorPageBytes)
	case d.host.account != nil && !allowed(f, fi, *d.host.account, unix.R_OK):
		d.errorf(ref.rng, "Unreadable error page", "%s %q cannot be read by the workers' account %s: mode %04o.", ref.what, p.File, d.host.account, fi.Mode().Perm())
	}
}

// ErrorPageRoots are the directories error pages are read through that
// are not static roots, in file order: the supervisor hands them to the
// workers as it does static roots.
func (c *Config) ErrorPageRoots() []string {
	var roots []string
	add := func(pages []ErrorPage) {
		for _, p := range pages {
			if !slices.Contains(roots, p.Root) && !c.isStaticRoot(p.Root) {
				roots = append(roots, p.Root)
			}
		}
	}
	add(c.ErrorPages)
	for _, r := range c.Routes {
		add(r.ErrorPages)
	}
	return roots
}

func (c *Config) isStaticRoot(dir string) bool {
	for _, r := range c.Routes {
		if r.Static != nil && r.Static.Root == dir {
			return true
		}
	}
	return false
}
