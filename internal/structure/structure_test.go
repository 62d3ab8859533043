package structure

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// maxFileLines is STYLE's bound on a file's length.
const maxFileLines = 500

// maxMethodFiles is the bound on the files a type's methods live in.
const maxMethodFiles = 2

// facadeLines bounds the facade package's non-test lines, today's figure,
// within the target of 3,000: it only shrinks.
const facadeLines = 2999

// spread are the types whose methods live in more than maxMethodFiles
// files today, and in how many: the figures only shrink.
var spread = map[string]int{
	"subscriber.Subscription": 7, // the facade's public type may spread by feature
}

// file is one parsed non-test Go file of subscriber/...
type file struct {
	pkg   string // directory, relative to root
	name  string // path, relative to root
	lines int
	ast   *ast.File
}

// parseTree parses every non-test Go file under dir, relative to root.
func parseTree(t *testing.T, dir string) []file {
	t.Helper()
	fset := token.NewFileSet()
	var files []file
	err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, file{
			pkg: filepath.Dir(rel), name: rel, ast: f,
			lines: strings.Count(string(src), "\n"),
		})
		return nil
	})
	require.NoError(t, err)
	return files
}

// receiverType names the type a method is declared on, without its pointer.
func receiverType(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	x := fd.Recv.List[0].Type
	if s, ok := x.(*ast.StarExpr); ok {
		x = s.X
	}
	if ix, ok := x.(*ast.IndexExpr); ok {
		x = ix.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// methodFiles maps "pkg.Type" to the set of files that hold its methods,
// and the number of its methods.
func methodFiles(files []file) (map[string]map[string]bool, map[string]int) {
	where, count := map[string]map[string]bool{}, map[string]int{}
	for _, f := range files {
		for _, d := range f.ast.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || receiverType(fd) == "" {
				continue
			}
			typ := f.pkg + "." + receiverType(fd)
			if where[typ] == nil {
				where[typ] = map[string]bool{}
			}
			where[typ][f.name] = true
			count[typ]++
		}
	}
	return where, count
}

// fieldOwners maps a field name to the "pkg.Type"s of the package's
// struct types that declare it. A write is attributed to a type only
// where the name is one type's alone (the measure is syntactic: no types).
func fieldOwners(files []file) map[string]map[string][]string {
	owners := map[string]map[string][]string{} // pkg -> field -> types
	for _, f := range files {
		if owners[f.pkg] == nil {
			owners[f.pkg] = map[string][]string{}
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				for _, name := range fl.Names {
					owners[f.pkg][name.Name] = append(owners[f.pkg][name.Name], f.pkg+"."+ts.Name.Name)
				}
			}
			return true
		})
	}
	return owners
}

// writtenFields calls fn with every selector a statement of f assigns to,
// increments or decrements.
func writtenFields(f *ast.File, fn func(sel *ast.SelectorExpr)) {
	lhs := func(x ast.Expr) {
		if ix, ok := x.(*ast.IndexExpr); ok {
			x = ix.X
		}
		if sel, ok := x.(*ast.SelectorExpr); ok {
			fn(sel)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.AssignStmt:
			for _, x := range s.Lhs {
				lhs(x)
			}
		case *ast.IncDecStmt:
			lhs(s.X)
		}
		return true
	})
}

// fieldWriters maps "pkg.Type" to the files that write a field of it, by
// a field name only that type of its package declares.
func fieldWriters(files []file) map[string]map[string]bool {
	owners := fieldOwners(files)
	writers := map[string]map[string]bool{}
	for _, f := range files {
		writtenFields(f.ast, func(sel *ast.SelectorExpr) {
			if id, ok := sel.X.(*ast.Ident); ok && isImport(f.ast, id.Name) {
				return // a package's variable, not a field
			}
			types := owners[f.pkg][sel.Sel.Name]
			if len(types) != 1 {
				return
			}
			if writers[types[0]] == nil {
				writers[types[0]] = map[string]bool{}
			}
			writers[types[0]][f.name] = true
		})
	}
	return writers
}

// isImport reports whether name is a package f imports.
func isImport(f *ast.File, name string) bool {
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		if (imp.Name != nil && imp.Name.Name == name) || (imp.Name == nil && filepath.Base(path) == name) {
			return true
		}
	}
	return false
}

// TestSubscriberStructure logs the figures of subscriber/... and guards
// the ones that hold: no non-test file over maxFileLines.
func TestSubscriberStructure(t *testing.T) {
	files := parseTree(t, "subscriber")
	require.NotEmpty(t, files)

	lines, nfiles := map[string]int{}, map[string]int{}
	var long []string
	for _, f := range files {
		lines[f.pkg] += f.lines
		nfiles[f.pkg]++
		if f.lines > maxFileLines {
			long = append(long, f.name)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(lines)) {
		t.Logf("package %-40s %6d lines in %3d files", pkg, lines[pkg], nfiles[pkg])
	}

	where, count := methodFiles(files)
	writers := fieldWriters(files)
	for _, typ := range slices.Sorted(maps.Keys(where)) {
		if len(where[typ]) > 1 || len(writers[typ]) > 1 {
			t.Logf("type %-40s %3d methods in %2d files; fields written in %2d files",
				typ, count[typ], len(where[typ]), len(writers[typ]))
		}
	}
	over := 0
	for _, typ := range slices.Sorted(maps.Keys(where)) {
		n := len(where[typ])
		if n > maxMethodFiles {
			over++
		}
		assert.LessOrEqual(t, n, max(maxMethodFiles, spread[typ]), "files holding the methods of %s", typ)
	}
	t.Logf("types with methods in more than %d files: %d", maxMethodFiles, over)
	for _, typ := range slices.Sorted(maps.Keys(writers)) {
		if foreign := foreignWriters(typ, where[typ], writers[typ], files); len(foreign) > 0 {
			t.Logf("fields of %s written in files without its methods: %v", typ, foreign)
		}
	}
	t.Logf("non-test files over %d lines: %v", maxFileLines, long)

	assert.Empty(t, long, "STYLE: files under %d lines", maxFileLines)
	assert.LessOrEqual(t, lines["subscriber"], facadeLines, "the facade's lines (target 3,000)")
}

// foreignWriters lists the files that write typ's fields but neither
// declare typ nor hold a method of it.
func foreignWriters(typ string, methods, writers map[string]bool, files []file) []string {
	var foreign []string
	for _, name := range slices.Sorted(maps.Keys(writers)) {
		if !methods[name] && !declares(files, name, typ) {
			foreign = append(foreign, name)
		}
	}
	return foreign
}

// declares reports whether the file called name declares "pkg.Type" typ.
func declares(files []file, name, typ string) bool {
	for _, f := range files {
		if f.name != name {
			continue
		}
		for _, d := range f.ast.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, sp := range gd.Specs {
				if ts, ok := sp.(*ast.TypeSpec); ok && f.pkg+"."+ts.Name.Name == typ {
					return true
				}
			}
		}
	}
	return false
}
