package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A level set holds the slog levels a message is logged at, by name:
// "Debug", "Info", "Warn", "Error".
type levels map[string]bool

var levelNames = []string{"Debug", "Info", "Warn", "Error"}

func (l levels) String() string {
	var names []string
	for _, n := range levelNames {
		if l[n] {
			names = append(names, n)
		}
	}
	return strings.Join(names, " and ")
}

// logged returns every message that the Go source under dir, its tests
// aside, passes to log/slog, with the levels it is logged at. It reads the
// source, not the running program: a message is a string constant, or
// built from constants and the parameters of its function, which are
// followed to the arguments its callers pass. A call of slog's own
// functions or of a Log or LogAttrs method whose message cannot be told
// so fails the test, rather than go unchecked. A directory under dir that
// is in sources itself is left to its own call.
func logged(t *testing.T, dir string) map[string]levels {
	t.Helper()
	out := map[string]levels{}
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		if rel, _ := filepath.Rel(root, path); path != dir && sources[filepath.ToSlash(rel)] != "" {
			return filepath.SkipDir // a package with a prefix of its own
		}
		p := parsePackage(t, path)
		for _, c := range p.calls {
			p.logCall(t, c, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A pkg is one directory's Go source, its tests aside.
type pkg struct {
	fset *token.FileSet
	// values holds the package-level constants and variables with an
	// initial value, by name.
	values map[string]ast.Expr
	calls  []call
}

// A call is a call expression and the function declaration it is in.
type call struct {
	expr *ast.CallExpr
	in   *ast.FuncDecl
}

func parsePackage(t *testing.T, dir string) *pkg {
	t.Helper()
	p := &pkg{fset: token.NewFileSet(), values: map[string]ast.Expr{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(p.fset, filepath.Join(dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if vs, ok := s.(*ast.ValueSpec); ok {
						for i, n := range vs.Names {
							if i < len(vs.Values) {
								p.values[n.Name] = vs.Values[i]
							}
						}
					}
				}
			case *ast.FuncDecl:
				if d.Body != nil {
					ast.Inspect(d.Body, func(n ast.Node) bool {
						if c, ok := n.(*ast.CallExpr); ok {
							p.calls = append(p.calls, call{c, d})
						}
						return true
					})
				}
			}
		}
	}
	return p
}

// logCall adds to out the messages c logs, if it is a logging call:
// slog's Debug, Info, Warn and Error, as functions or methods, their
// Context forms, and the Log and LogAttrs methods.
func (p *pkg) logCall(t *testing.T, c call, out map[string]levels) {
	sel, ok := c.expr.Fun.(*ast.SelectorExpr)
	if !ok {
		return
	}
	args, name := c.expr.Args, sel.Sel.Name
	var msg, level ast.Expr
	var lv string
	switch base := strings.TrimSuffix(name, "Context"); {
	case name == "Log" || name == "LogAttrs":
		if len(args) < 3 {
			return
		}
		level, msg = args[1], args[2]
	case base == "Debug" || base == "Info" || base == "Warn" || base == "Error":
		i := 0
		if name != base {
			i = 1 // WarnContext and the like take ctx first
		}
		if len(args) <= i {
			return
		}
		msg, lv = args[i], base
	default:
		return
	}
	pos := p.fset.Position(c.expr.Pos())
	msgs := p.eval(msg, c.in, 0)
	if len(msgs) == 0 {
		// Debug, Info, Warn and Error are common method names (http.Error
		// takes a ResponseWriter first): a call of one is a log call only
		// if its message is a string, or if it is slog's.
		if x, ok := sel.X.(*ast.Ident); (ok && x.Name == "slog") || level != nil {
			t.Errorf("%s: cannot tell the message this call logs", pos)
		}
		return
	}
	lvs := levels{}
	if level == nil {
		lvs[lv] = true
	} else {
		for _, l := range p.eval(level, c.in, 0) {
			lvs[l] = true
		}
		if len(lvs) == 0 {
			t.Errorf("%s: cannot tell the level this call logs at", pos)
		}
	}
	for _, m := range msgs {
		if out[m] == nil {
			out[m] = levels{}
		}
		for l := range lvs {
			out[m][l] = true
		}
	}
}

// eval returns the values e can take in function in: strings, and for
// slog's level constants (slog.LevelWarn) their names ("Warn").
func (p *pkg) eval(e ast.Expr, in *ast.FuncDecl, depth int) []string {
	if depth > 8 {
		return nil
	}
	switch e := e.(type) {
	case *ast.BasicLit:
		if s, err := strconv.Unquote(e.Value); err == nil && e.Kind == token.STRING {
			return []string{s}
		}
	case *ast.ParenExpr:
		return p.eval(e.X, in, depth)
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return nil
		}
		var out []string
		for _, x := range p.eval(e.X, in, depth) {
			for _, y := range p.eval(e.Y, in, depth) {
				out = append(out, x+y)
			}
		}
		return out
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "slog" && strings.HasPrefix(e.Sel.Name, "Level") {
			return []string{strings.TrimPrefix(e.Sel.Name, "Level")}
		}
	case *ast.Ident:
		return p.evalIdent(e, in, depth)
	}
	return nil
}

// evalIdent evaluates a name: a constant or a variable, by its
// declaration and every assignment to it in function in, or a parameter
// of in, by the arguments of every call of a function of in's name.
func (p *pkg) evalIdent(id *ast.Ident, in *ast.FuncDecl, depth int) []string {
	if id.Obj == nil { // declared in another file of the package
		if v, ok := p.values[id.Name]; ok {
			return p.eval(v, nil, depth+1)
		}
		return nil
	}
	if f, ok := id.Obj.Decl.(*ast.Field); ok {
		return p.evalParam(f, id.Name, in, depth)
	}
	var out []string
	same := func(x ast.Expr) bool {
		xi, ok := x.(*ast.Ident)
		return ok && xi.Obj == id.Obj
	}
	add := func(names []ast.Expr, values []ast.Expr) {
		if len(names) != len(values) {
			return
		}
		for i, n := range names {
			if same(n) {
				out = append(out, p.eval(values[i], in, depth+1)...)
			}
		}
	}
	if vs, ok := id.Obj.Decl.(*ast.ValueSpec); ok {
		names := make([]ast.Expr, len(vs.Names))
		for i, n := range vs.Names {
			names[i] = n
		}
		add(names, vs.Values)
	}
	if in != nil && in.Body != nil {
		ast.Inspect(in.Body, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok {
				add(as.Lhs, as.Rhs)
			}
			return true
		})
	}
	return out
}

// evalParam evaluates in's parameter name, declared by f, as the
// arguments its callers in the package pass for it.
func (p *pkg) evalParam(f *ast.Field, name string, in *ast.FuncDecl, depth int) []string {
	if in == nil {
		return nil
	}
	index, n := -1, 0
	for _, field := range in.Type.Params.List {
		for _, fn := range field.Names {
			if field == f && fn.Name == name {
				index = n
			}
			n++
		}
	}
	if index < 0 {
		return nil // a parameter of a function literal
	}
	var out []string
	for _, c := range p.calls {
		var callee string
		switch fun := c.expr.Fun.(type) {
		case *ast.Ident:
			callee = fun.Name
		case *ast.SelectorExpr:
			callee = fun.Sel.Name
		}
		if callee == in.Name.Name && len(c.expr.Args) == n {
			out = append(out, p.eval(c.expr.Args[index], c.in, depth+1)...)
		}
	}
	return out
}
