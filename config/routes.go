package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"os"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// route decodes one route block; keys maps the hosts and prefixes of earlier
// route blocks to where they are.
func (d *decoder) route(b *hcl.Block, cfg *Config, keys map[routeKey]hcl.Range) {
	prefix := b.Labels[0]
	r := Route{Prefix: prefix}
	ok := true
	switch {
	case !strings.HasPrefix(prefix, "/"):
		d.errorf(b.LabelRanges[0], "Invalid route prefix", "A route prefix must start with \"/\", got %q.", prefix)
		ok = false
	case strings.ContainsAny(prefix, " \t?#") || hasCTL(prefix):
		d.errorf(b.LabelRanges[0], "Invalid route prefix",
			"A route prefix is a URL path and may not hold spaces, control characters, \"?\" or \"#\", got %q.", prefix)
		ok = false
	}

	content, diags := b.Body.Content(routeSchema)
	d.add(diags)
	name := fmt.Sprintf("route %q", prefix)
	if !d.routeHosts(content.Attributes, name, &r) || !d.claimRoute(&r, b.LabelRanges[0], b.DefRange, keys) {
		ok = false
	}
	d.upload(content.Attributes, name, &r)
	boolAttr(d, content.Attributes, "allow_trace", name+": allow_trace", &r.AllowTrace)
	buffering := true
	boolAttr(d, content.Attributes, "request_buffering", name+": request_buffering", &buffering)
	r.StreamBody = !buffering
	if class, rng, found := stringAttr(d, content.Attributes, "class", name+": class"); found {
		switch class {
		case "request":
		case "stream":
			r.Stream = true
		default:
			d.errorf(rng, "Invalid value", "%s: class is \"request\" or \"stream\", got %q.", name, class)
		}
	}
	d.routeOptions(content, name, &r, cfg)
	handlers := handlerBlocks(d.routeSite(content, name, cfg.BaseDir, &r))
	for i, blk := range content.Blocks.OfType("compress") {
		if i > 0 {
			d.errorf(blk.DefRange, "Duplicate compress block", "%s has more than one compress block.", name)
			ok = false
		} else if r.Compress = d.compress(blk, name); r.Compress == nil {
			ok = false
		}
	}
	if len(handlers) == 0 {
		d.errorf(b.DefRange, "Missing route handler", "%s needs one handler block (static, respond, redirect, proxy, metrics or embedded).", name)
		return
	}
	for _, h := range handlers[1:] {
		d.errorf(h.DefRange, "Duplicate route handler",
			"%s already has a %s block at %s; a route has exactly one handler block (static, respond, redirect, proxy, metrics or embedded).", name, handlers[0].Type, handlers[0].DefRange)
	}
	switch h := handlers[0]; h.Type {
	case "static":
		r.Static = d.static(h, name, cfg.BaseDir)
	case "respond":
		r.Respond = d.respond(h, name)
	case "proxy":
		r.Proxy = d.proxy(h, name)
	case "metrics":
		r.Metrics = d.metrics(h, name)
	case "embedded":
		r.Embedded = d.embedded(h, name)
	case "redirect":
		r.Redirect = d.redirect(h, name)
	}
	if ok && len(handlers) == 1 && (r.Static != nil || r.Respond != nil || r.Proxy != nil || r.Metrics != nil || r.Embedded != nil || r.Redirect != nil) {
		cfg.Routes = append(cfg.Routes, r)
	}
}

func (d *decoder) static(b *hcl.Block, route, base string) *Static {
	attrs := d.attrs(b, staticSchema)
	s := &Static{Index: defaultIndex, DefaultType: DefaultStaticType, Precompressed: true, MaxRanges: DefaultMaxRanges}
	ok := true
	root, rng, found := stringAttr(d, attrs, "root", route+": static.root")
	switch {
	case !found:
		ok = false // missing (HCL reported it) or not a string
	case root == "" || strings.ContainsRune(root, 0):
		d.errorf(rng, "Invalid value", "%s: static.root must be a directory path, got %q.", route, root)
		ok = false
	default:
		s.Root = resolve(base, root)
		if d.host != nil && !d.checkRoot(route, s.Root, rng) {
			ok = false
		}
	}
	if index, rng, found := stringAttr(d, attrs, "index", route+": static.index"); found {
		if index == "" || index == "." || index == ".." || strings.ContainsAny(index, "/\\") || hasCTL(index) {
			d.errorf(rng, "Invalid value", "%s: static.index must be a file name without \"/\", got %q.", route, index)
			ok = false
		} else {
			s.Index = index
		}
	}
	boolAttr(d, attrs, "listing", route+": static.listing", &s.Listing)
	if ct, rng, found := stringAttr(d, attrs, "default_type", route+": static.default_type"); found {
		// It becomes a header line, so it must not smuggle CR or LF.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !strings.Contains(mt, "/") || hasCTL(ct) {
			d.errorf(rng, "Invalid value", "%s: static.default_type must be a media type such as \"application/octet-stream\", got %q.", route, ct)
			ok = false
		} else {
			s.DefaultType = ct
		}
	}
	boolAttr(d, attrs, "precompressed", route+": static.precompressed", &s.Precompressed)
	intAttr(d, attrs, "max_ranges", route+": static.max_ranges", 0, 1000, &s.MaxRanges)
	if !d.staticFallback(attrs, route, s) {
		ok = false
	}
	if !ok {
		return nil
	}
	return s
}

// checkDir returns an error phrased to follow a path if dir is not an
// existing directory.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("%q: %v", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%q is not a directory", dir)
	}
	return nil
}

func (d *decoder) respond(b *hcl.Block, route string) *Respond {
	attrs := d.attrs(b, respondSchema)
	r := &Respond{Status: defaultStatus, ContentType: defaultContentType}
	ok := true
	intAttr(d, attrs, "status", route+": respond.status", 200, 599, &r.Status)
	ok = d.respondRedirectStatus(attrs, route, r.Status)
	if body, rng, found := stringAttr(d, attrs, "body", route+": respond.body"); found {
		r.Body = body
		if body != "" && (r.Status == 204 || r.Status == 304) {
			// RFC 9110 §15.3.5, §15.4.5: these responses end at the head.
			d.errorf(rng, "Invalid value", "%s: respond.status %d never carries a body; remove respond.body.", route, r.Status)
			ok = false
		}
	}
	if ct, rng, found := stringAttr(d, attrs, "content_type", route+": respond.content_type"); found {
		// It becomes a header line, so it must not smuggle CR or LF.
		if _, _, err := mime.ParseMediaType(ct); err != nil || hasCTL(ct) {
			d.errorf(rng, "Invalid value", "%s: respond.content_type must be a media type such as \"text/plain; charset=utf-8\", got %q.", route, ct)
			ok = false
		} else {
			r.ContentType = ct
		}
	}
	if !ok {
		return nil
	}
	return r
}

// upload decodes a route's large-upload policy.
func (d *decoder) upload(attrs hcl.Attributes, name string, r *Route) {
	if _, found := attrs["max_body_bytes"]; found {
		var n int64
		intAttr(d, attrs, "max_body_bytes", name+": max_body_bytes", 0, 1<<40, &n)
		r.MaxBodyBytes = &n
	}
	intAttr(d, attrs, "max_upload_bytes", name+": max_upload_bytes", 1, 1<<40, &r.MaxUploadBytes)
	hashes, rngs := stringListAttr(d, attrs, "upload_token_sha256", name+": upload_token_sha256")
	for i, h := range hashes {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			d.errorf(rngs[i], "Invalid value", "%s: upload_token_sha256 entries are 64 hex digits (the SHA-256 of a token), got %q.", name, h)
			continue
		}
		r.UploadTokenSHA256 = append(r.UploadTokenSHA256, [32]byte(b))
	}
	if a, ok := attrs["upload_token_sha256"]; ok && r.MaxUploadBytes == 0 {
		d.errorf(a.Range, "Missing max_upload_bytes", "%s: upload_token_sha256 has no effect without max_upload_bytes.", name)
	}
	// Without a token nothing can be accepted, so every upload over the cap
	// would get 401. A program that authorizes uploads itself
	// (ParseOptions.AuthorizesUploads) needs none; a re-parsing worker
	// trusts the supervisor's check.
	if a, ok := attrs["max_upload_bytes"]; ok && r.MaxUploadBytes > 0 && len(hashes) == 0 && d.host != nil && !d.host.authorizesUploads {
		d.errorf(a.Range, "Missing upload_token_sha256",
			"%s: max_upload_bytes raises the cap only for a request carrying an accepted token, and upload_token_sha256 lists none, so every larger upload would get 401; add the SHA-256 of a token, or use max_body_bytes to raise the route's cap for every request.", name)
	}
}
