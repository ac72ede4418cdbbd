package config

import (
	"cmp"
	"io"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Error is every problem Parse found in one file. Each diagnostic names the
// file, line and columns of what it complains about; Error lists them all,
// one per line, in file order.
type Error struct {
	// Diagnostics holds at least one error, sorted by position.
	Diagnostics hcl.Diagnostics

	file *hcl.File // for WriteText's source snippets; nil if unparsable
}

func newError(diags hcl.Diagnostics, file *hcl.File) *Error {
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
	return &Error{Diagnostics: diags, file: file}
}

// Error returns one "file:line,col-col: Summary; Detail" line per diagnostic.
func (e *Error) Error() string {
	var b strings.Builder
	for i, d := range e.Diagnostics {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(d.Error())
	}
	return b.String()
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
