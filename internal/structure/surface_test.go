package structure

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/keyorder/keyorder/"

// engineNames bounds how many names of the engine (its types, functions,
// constants, variables, methods and fields) each package that runs on it
// uses: push and parking, the doors, at most 15 each (the carve-out's
// target), and the facade, which aliases the handler's vocabulary and
// builds the engine, as many as today, a figure that only shrinks.
var engineNames = map[string]int{
	"subscriber/internal/push":    15, // 9 today
	"subscriber/internal/parking": 15, // 15 today
	"subscriber":                  104,
}

// TestEngineNames logs, and bounds, the names of subscriber/internal/engine
// that each door's non-test files use, found by type-checking them
// against the compiled export data of their imports (go list -export).
func TestEngineNames(t *testing.T) {
	for _, door := range slices.Sorted(func(yield func(string) bool) {
		for k := range engineNames {
			if !yield(k) {
				return
			}
		}
	}) {
		names := usedNames(t, door, module+"subscriber/internal/engine")
		t.Logf("%s uses %d names of the engine (bound %d): %s", door, len(names), engineNames[door], strings.Join(names, ", "))
		assert.LessOrEqual(t, len(names), engineNames[door], "%s uses more names of the engine than its bound", door)
	}
}

// usedNames type-checks the non-test files of dir, relative to root, and
// returns the names of pkg's objects they use, as "Name", "Type.Method"
// or "Type.Field".
func usedNames(t *testing.T, dir, pkg string) []string {
	t.Helper()
	exports := exportData(t, dir)
	fset := token.NewFileSet()
	entries, err := os.ReadDir(filepath.Join(root, dir))
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, dir, n), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		if f := exports[path]; f != "" {
			return os.Open(f)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	_, err = conf.Check(dir, fset, files, info)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, o := range info.Uses {
		if o.Pkg() != nil && o.Pkg().Path() == pkg {
			seen[objectName(o)] = true
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	})
}

// objectName names o as usedNames returns it.
func objectName(o types.Object) string {
	owner := func(t types.Type) string {
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if n, ok := t.(*types.Named); ok {
			return n.Obj().Name() + "."
		}
		return ""
	}
	switch o := o.(type) {
	case *types.Func:
		if r := o.Type().(*types.Signature).Recv(); r != nil {
			return owner(r.Type()) + o.Name()
		}
	case *types.Var:
		if o.IsField() {
			return "field " + o.Name() // the struct is not at hand: named alone
		}
	}
	return o.Name()
}

// exportData maps each package dir imports, directly or not, to its
// compiled export data.
func exportData(t *testing.T, dir string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".")
	cmd.Dir = filepath.Join(root, dir)
	out, err := cmd.Output()
	require.NoError(t, err)
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, export, ok := strings.Cut(sc.Text(), " "); ok {
			m[path] = export
		}
	}
	return m
}
