package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Go block of a document is built by these rules, so that every snippet
// a reader copies compiles against the code as it is:
//
//   - A block whose code begins with "package" is a complete file, built
//     as it is, a package of its own.
//   - Any other block is a fragment, in a package of its own with the
//     environment below. A fragment of declarations (a func, a type) is
//     put at file level; any other is the body of a function, where every
//     name it declares at its top level counts as used, since a fragment
//     stops before it uses them all.
//   - A fragment may use the names of the environment without declaring
//     them, and may redeclare them; and the packages of imports by their
//     usual names, which are imported for it.
//
// Each block is vetted (which type-checks it) and built in a directory
// under testdata, inside the repository, so that go.work resolves keyorder's
// packages to this checkout; the directory goes when the test ends.

// snippetEnv is the environment of fragments: the values a document's
// snippets take as given.
const snippetEnv = `package snippet

import (
	"context"
	"database/sql"
	"testing"

	"cloud.google.com/go/pubsub/v2"

	"github.com/keyorder/keyorder/subscriber"
)

var (
	ctx    context.Context
	t      *testing.T
	client *pubsub.Client
	db     *sql.DB // the writer's database
	rdb    *sql.DB // the receiver's database
	tx     *sql.Tx
	sub    *subscriber.Subscription
	event  []byte
)

// amount is what an application reads from a delivery.
func amount(*subscriber.Delivery) int64 { return 0 }
`

// snippetImports are the packages a fragment may use, by name.
var snippetImports = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"http":         "net/http",
	"sql":          "database/sql",
	"testing":      "testing",
	"time":         "time",
	"codes":        "google.golang.org/grpc/codes",
	"pubsub":       "cloud.google.com/go/pubsub/v2",
	"ordering":     "github.com/keyorder/keyorder/ordering",
	"orderingtest": "github.com/keyorder/keyorder/ordering/orderingtest",
	"publisher":    "github.com/keyorder/keyorder/publisher",
	"outbox":       "github.com/keyorder/keyorder/publisher/outbox",
	"subscriber":   "github.com/keyorder/keyorder/subscriber",
	"inbox":        "github.com/keyorder/keyorder/subscriber/inbox",
}

// A block is a document's Go block, and the line it starts on.
type block struct {
	line int
	code string
}

// goBlocks returns the ```go blocks of a Markdown document.
func goBlocks(doc []byte) []block {
	var out []block
	var cur *block
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{line: n + 1}
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return out
}

// snippetFiles returns the files of b's package, by name, following the
// rules above.
func snippetFiles(b block) (map[string]string, error) {
	if isComplete(b.code) {
		return map[string]string{"main.go": b.code}, nil
	}
	var src string
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\n"+b.code, 0); err == nil {
		src = "package snippet\n\n" + b.code
	} else {
		body := b.code
		f, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\nfunc _() {\n"+body+"\n}", 0)
		if err != nil {
			return nil, fmt.Errorf("neither declarations nor statements: %w", err)
		}
		for _, name := range topLevelNames(f) {
			body += "_ = " + name + "\n"
		}
		src = "package snippet\n\nfunc _() {\n" + body + "}\n"
	}
	imports, err := usedImports(src)
	if err != nil {
		return nil, err
	}
	if len(imports) > 0 {
		src = strings.Replace(src, "package snippet\n", "package snippet\n\nimport (\n\t"+strings.Join(imports, "\n\t")+"\n)\n", 1)
	}
	return map[string]string{"env.go": snippetEnv, "snippet.go": src}, nil
}

// isComplete reports whether code is a whole Go file: its first line
// that is not a comment or blank begins with "package".
func isComplete(code string) bool {
	for _, line := range strings.Split(code, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "//") {
			continue
		}
		return strings.HasPrefix(line, "package ")
	}
	return false
}

// topLevelNames returns the names the function of f declares in its
// outermost block, with := or var, in order, once each.
func topLevelNames(f *ast.File) []string {
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	fn := f.Decls[0].(*ast.FuncDecl)
	for _, st := range fn.Body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, l := range st.Lhs {
					if id, ok := l.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.DeclStmt:
			if gd, ok := st.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR {
				for _, sp := range gd.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						add(id)
					}
				}
			}
		}
	}
	return names
}

// usedImports returns the import specs of the packages src uses as
// qualifiers, from snippetImports; a qualifier that is neither declared in
// src nor known there is an error.
func usedImports(src string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		return nil, err
	}
	unresolved := map[*ast.Ident]bool{}
	for _, id := range f.Unresolved {
		unresolved[id] = true
	}
	set := map[string]bool{}
	var unknown []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		x, ok := sel.X.(*ast.Ident)
		if !ok || !unresolved[x] {
			return true
		}
		if path, ok := snippetImports[x.Name]; ok {
			set[fmt.Sprintf("%q", path)] = true
		} else if !strings.Contains(snippetEnv, "\t"+x.Name+" ") {
			unknown = append(unknown, x.Name)
		}
		return true
	})
	if len(unknown) > 0 {
		return nil, fmt.Errorf("uses %s, neither declared nor a package of snippetImports", strings.Join(unknown, ", "))
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// buildBlocks writes each Go block of doc into a package of its own under
// testdata and vets and builds them all, returning what the go command
// said when it failed.
func buildBlocks(t *testing.T, doc []byte) error {
	t.Helper()
	blocks := goBlocks(doc)
	require.NotEmpty(t, blocks, "no ```go block")
	require.NoError(t, os.MkdirAll("testdata", 0o755))
	dir, err := os.MkdirTemp("testdata", "snippets-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var pkgs []string
	for i, b := range blocks {
		files, err := snippetFiles(b)
		if err != nil {
			return fmt.Errorf("the block at line %d: %w", b.line, err)
		}
		pkg := filepath.Join(dir, fmt.Sprintf("line%d", b.line))
		require.NoError(t, os.Mkdir(pkg, 0o755), "block %d", i)
		for name, src := range files {
			require.NoError(t, os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o644))
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(pkg))
	}
	for _, args := range [][]string{{"vet"}, {"build", "-o", os.DevNull}} {
		if len(pkgs) > 1 && args[0] == "build" {
			args = args[:1] // several packages: built and discarded
		}
		cmd := exec.Command("go", append(args, pkgs...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", args[0], err, out)
		}
	}
	return nil
}

// TestREADMEGoBlocksBuild builds every Go block of the README by the rules
// above, so that a snippet a reader copies compiles.
func TestREADMEGoBlocksBuild(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	require.NoError(t, buildBlocks(t, doc))
}

// TestBrokenBlocksFail: the check fails on a fragment that names what the
// code does not have, misuses a name it has, or uses an unknown package,
// and says what.
func TestBrokenBlocksFail(t *testing.T) {
	for name, tc := range map[string]struct{ code, says string }{
		"a missing name":     {"p, err := publisher.New(client, \"t\", publisher.WithNoSuchOption())\n", "WithNoSuchOption"},
		"a wrong type":       {"var n int = subscriber.DefaultWorkers + \"1\"\n", "DefaultWorkers"},
		"an unknown package": {"x := nosuch.Thing()\n", "the block at line 4: uses nosuch"},
	} {
		t.Run(name, func(t *testing.T) {
			err := buildBlocks(t, []byte("# doc\n\n```go\n"+tc.code+"```\n"))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.says)
		})
	}
}
