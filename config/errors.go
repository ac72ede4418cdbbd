package config

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Error is every problem Parse found in one file. Each diagnostic names the
// file, line and columns of what it complains about; Error lists them all,
// one per line, in file order.
type Error struct {
	// Diagnostics holds at least one error, and any warnings, sorted by
	// position.
	Diagnostics hcl.Diagnostics

	file *hcl.File // for WriteText's source snippets; nil if unparsable
}

func newError(diags hcl.Diagnostics, file *hcl.File) *Error {
	return &Error{Diagnostics: sorted(diags), file: file}
}

// sorted returns a copy of diags in file order.
func sorted(diags hcl.Diagnostics) hcl.Diagnostics {
	diags = slices.Clone(diags)
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		if a.Subject == nil || b.Subject == nil {
			return 0
		}
		return cmp.Or(
			strings.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte),
		)
	})
	return diags
}

// Error returns one "file:line,col-col: Summary; Detail" line per diagnostic,
// "file:line,col-col: warning: Summary; Detail" for a warning.
func (e *Error) Error() string {
	var b strings.Builder
	for i, d := range e.Diagnostics {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(diagnosticText(d))
	}
	return b.String()
}

// diagnosticText is d's line in Error.
func diagnosticText(d *hcl.Diagnostic) string {
	if d.Severity == hcl.DiagWarning && d.Subject != nil {
		return fmt.Sprintf("%s: warning: %s; %s", d.Subject, d.Summary, d.Detail)
	}
	return d.Error()
}

// Unwrap returns each diagnostic as an error, so errors.As finds an
// *hcl.Diagnostic.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Diagnostics))
	for i, d := range e.Diagnostics {
		errs[i] = d
	}
	return errs
}

// WriteText writes the diagnostics to w the way HCL tools do, each with the
// offending source line underlined; width wraps the text (0 = no wrapping).
// `gatehouse -check` uses it.
func (e *Error) WriteText(w io.Writer, width uint, color bool) error {
	files := map[string]*hcl.File{}
	if e.file != nil {
		for _, d := range e.Diagnostics {
			if d.Subject != nil {
				files[d.Subject.Filename] = e.file
			}
		}
	}
	return hcl.NewDiagnosticTextWriter(w, files, width, color).WriteDiagnostics(e.Diagnostics)
}
