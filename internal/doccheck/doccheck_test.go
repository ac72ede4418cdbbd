// Package doccheck holds tests that keep the repository self-contained and
// readable: no file cites a document outside it, every citation of
// docs/DESIGN.md names a section that exists, no hand-written Go source
// file or package outgrows one concern, and no package imports one it sits
// in.
package doccheck

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository root, two levels above this package.
const root = "../.."

// sections are DESIGN.md's top-level sections, numbered as the product's
// specification numbers them; code cites them by these numbers.
var sections = []string{
	"1. Processes and trust",
	"2. Connection lifecycle",
	"3. A request round in the worker",
	"4. The IPC channel",
	"5. Sandbox",
	"6. Operating it",
	"7. Defaults",
	"8. Interfaces",
	"9. TLS",
	"10. Long-lived requests",
}

var (
	// outside matches a citation of a file outside the repository: the
	// product specification, the shared directory, the reference notes. (The
	// classes keep this line from matching itself; the word boundary keeps
	// protocol constants such as the proto enums' zero values out.)
	outside = regexp.MustCompile(`\b[S]PEC(\.md)?\b|\.\.[/]shared|\breference[/][a-z-]+\.txt`)
	// citation matches a citation of a DESIGN.md section.
	citation = regexp.MustCompile(`DESIGN\.md §(\d+(?:\.\d+)?)`)
	heading  = regexp.MustCompile(`(?m)^#{2,3} (\d+(?:\.\d+)?)\.? `)
)

// sources returns the repository's Go, Markdown and protobuf files and its
// Makefile, with their contents.
func sources(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(name)
		if ext != ".go" && ext != ".md" && ext != ".proto" && name != "Makefile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[path] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 50 {
		t.Fatalf("found %d source files under %s: not the repository", len(files), root)
	}
	return files
}

func TestNoCitationOutsideTheRepository(t *testing.T) {
	for path, text := range sources(t) {
		if filepath.Ext(path) == ".go" && strings.HasSuffix(path, ".pb.go") {
			continue // generated
		}
		for i, line := range strings.Split(text, "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q, outside the repository: %s", path, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}

func TestDesignCitationsExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	design := string(b)
	for _, s := range sections {
		if !strings.Contains(design, "\n## "+s+"\n") {
			t.Errorf("DESIGN.md has no section %q", s)
		}
	}
	have := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(design, -1) {
		have[m[1]] = true
	}
	for path, text := range sources(t) {
		for i, line := range strings.Split(text, "\n") {
			for _, m := range citation.FindAllStringSubmatch(line, -1) {
				if !have[m[1]] {
					t.Errorf("%s:%d cites docs/DESIGN.md §%s, which does not exist", path, i+1, m[1])
				}
			}
		}
	}
}

// maxSourceLines bounds a hand-written Go source file: past it a file has
// usually grown more than one concern, and should be split by concern as
// the dispatcher was.
const maxSourceLines = 500

func TestSourceFilesStaySmall(t *testing.T) {
	for path, text := range sources(t) {
		if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			continue
		}
		if n := strings.Count(text, "\n"); n > maxSourceLines {
			t.Errorf("%s has %d lines, over %d: split it by concern", path, n, maxSourceLines)
		}
	}
}

// maxPackageFiles bounds a package's hand-written non-test Go files: past it
// a package holds more than one concern, and is split into packages by
// concern, each with one job and a small API, as the supervisor's limits,
// log relay, upstream broker, views, privileges, static roots and canned
// replies were. It holds for every package, with no exception.
const maxPackageFiles = 30

func TestPackagesStaySmall(t *testing.T) {
	files := map[string]int{}
	for path := range sources(t) {
		if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			continue
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.ToSlash(dir)]++
	}
	for dir, n := range files {
		if n > maxPackageFiles {
			t.Errorf("%s has %d non-test Go files, over %d: split it into packages by concern", dir, n, maxPackageFiles)
		}
	}
	if files["supervisor"] == 0 {
		t.Fatalf("no Go file counted in supervisor: not the repository")
	}
}

// module is the import path of the repository's root.
const module = "github.com/gatehouse-dev/gatehouse"

// TestSubpackagesDoNotImportTheirParent: the packages under supervisor/ and
// worker/ sit below the loop and the round, which call down to them; one
// that imported a package it sits in would run its dependencies both ways.
// A test-helper package (ipc/ipctest) stands beside what it helps to test,
// and may.
func TestSubpackagesDoNotImportTheirParent(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for path, text := range sources(t) {
		if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			continue
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.ToSlash(dir)
		if strings.HasSuffix(dir, "test") {
			continue
		}
		f, err := parser.ParseFile(fset, path, text, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if !strings.HasPrefix(p, module+"/") {
				continue
			}
			checked++
			if up := strings.TrimPrefix(p, module+"/"); strings.HasPrefix(dir, up+"/") {
				t.Errorf("%s imports %s, a package it sits in: pass it an interface or a func instead", path, up)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d imports of the module's packages: not the repository", checked)
	}
}
