package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// ParseOptions says how Parse resolves and checks paths.
type ParseOptions struct {
	// BaseDir is the directory relative paths in the file are resolved
	// against; "" means the current working directory, and a relative
	// BaseDir is made absolute first.
	BaseDir string
	// SkipFSChecks skips the checks of the host a worker must start on
	// (host.go): the workers' account exists and is unprivileged and can
	// read every static root, the embedded handlers exist, the chroot is an
	// empty directory, the admin socket's directory exists. A sandboxed
	// worker, which cannot see the supervisor's file system, sets it when
	// re-parsing Config.Source.
	SkipFSChecks bool
	// Handlers are the names of the embedded handlers the worker program
	// has (worker.Options.Handlers); an embedded block naming another is an
	// error unless SkipFSChecks is set.
	Handlers []string
	// KeysAsUser makes a caller running as root read the TLS certificate
	// and key files as the account the supervisor drops to once started
	// (`user`; sandbox.SupervisorAccount): that account reads them again
	// on every reload, so a file only root can read is an error at start,
	// not a failed reload later. gatehouse sets it for -check and for a
	// start; unset, the files are read as the caller.
	KeysAsUser bool
	// SkipCertificates leaves the TLS certificate and key files unread by
	// the host checks: a running supervisor's reload reads them itself
	// (LoadKeyPair) and keeps the running certificate of a block whose
	// files fail to load.
	SkipCertificates bool
	// OpenRoot opens a static root for the host checks, which close it:
	// the directory workers will be handed (docs/DESIGN.md §5). Default:
	// open the path (O_PATH). A reloading supervisor, whose account may no
	// longer reach a root it opened at start, answers with that one.
	OpenRoot func(path string) (*os.File, error)
	// AuthorizesUploads says the worker program authorizes large uploads
	// itself (worker.Options.AuthorizeUpload), so a route's
	// max_upload_bytes needs no upload_token_sha256. Unset, such a route
	// is an error unless SkipFSChecks is set: every upload over its
	// max_body_bytes would get 401.
	AuthorizesUploads bool
}

// Load reads and parses the file at path for a worker program without
// embedded handlers. Relative paths in it resolve against the current working
// directory, and the host checks apply. Problems in the file are returned as
// an *Error.
func Load(path string) (*Config, error) { return LoadWith(path, ParseOptions{}) }

// LoadWith is Load with options: an embedding program's handler names.
func LoadWith(path string, opt ParseOptions) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return Parse(src, path, opt)
}

// Parse parses src as if read from filename, which appears in every error
// message. It returns a fresh Config with every default filled, or an *Error
// listing every problem found, and the warnings (Config.Warnings) with them.
func Parse(src []byte, filename string, opt ParseOptions) (*Config, error) {
	base, err := baseDir(opt.BaseDir)
	if err != nil {
		return nil, err
	}
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		// Stop at syntax errors: the partial body they leave would only
		// add confusing follow-on errors.
		return nil, newError(diags, file)
	}
	if len(src) > MaxSourceBytes {
		return nil, newError(hcl.Diagnostics{tooLarge(src, filename)}, file)
	}
	cfg := defaults()
	cfg.Source = bytes.Clone(src)
	cfg.Filename = filename
	cfg.BaseDir = base
	d := &decoder{diags: diags}
	if !opt.SkipFSChecks {
		d.host = &hostChecks{handlers: opt.Handlers, keysAsUser: opt.KeysAsUser, certificates: !opt.SkipCertificates, openRoot: opt.OpenRoot, authorizesUploads: opt.AuthorizesUploads}
	}
	d.root(file.Body, &cfg)
	if d.diags.HasErrors() {
		return nil, newError(d.diags, file)
	}
	for _, w := range sorted(d.diags) {
		cfg.Warnings = append(cfg.Warnings, diagnosticText(w))
	}
	return &cfg, nil
}

// MaxSourceBytes bounds the configuration file: the supervisor sends it
// whole to every worker in its Hello frame, which ipc caps at 64 KiB with
// the TLS certificate chains; error pages are read by the workers from their
// files and take no room in it.
const MaxSourceBytes = 48 << 10

// tooLarge is the error for a file over MaxSourceBytes, at the line where
// the limit falls.
func tooLarge(src []byte, filename string) *hcl.Diagnostic {
	line := 1 + bytes.Count(src[:MaxSourceBytes], []byte("\n"))
	pos := hcl.Pos{Line: line, Column: 1, Byte: MaxSourceBytes}
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Configuration too large",
		Detail: fmt.Sprintf("The file is %d bytes, over the %d a worker can be sent in its Hello frame (64 KiB with the TLS certificates); the limit falls on this line. Shorten it: error page bodies belong in files (error_page.file), not here.",
			len(src), MaxSourceBytes),
		Subject: &hcl.Range{Filename: filename, Start: pos, End: pos},
	}
}

func baseDir(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("config: resolving base directory: %w", err)
		}
		return wd, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("config: resolving base directory: %w", err)
	}
	return abs, nil
}

// resolve makes p absolute against base and cleans it.
func resolve(base, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	return filepath.Clean(p)
}
