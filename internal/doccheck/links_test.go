package doccheck

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's links that can break as the code and the other documents
// change: to a heading of a document of the repository, [x](DESIGN.md#the-inbox),
// and to a package or a name in it on pkg.go.dev.
var (
	docLinkRE = regexp.MustCompile(`\]\(([A-Z]+\.md)#([^)]+)\)`)
	pkgLinkRE = regexp.MustCompile(`\]\(https://pkg\.go\.dev/github\.com/keyorder/keyorder/([a-z/]+)(?:#([A-Za-z]+))?\)`)
	dirLinkRE = regexp.MustCompile(`\]\(((?:examples|ordering|publisher|subscriber)/[a-z/]*)\)`)
)

// TestREADMELinks checks that every heading the README links to exists in
// its document, by GitHub's anchor of it, and that every package and name
// it links to on pkg.go.dev, and every directory, is in the repository.
func TestREADMELinks(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	anchors := map[string]map[string]bool{}
	for _, m := range docLinkRE.FindAllStringSubmatch(string(readme), -1) {
		doc, anchor := m[1], m[2]
		if anchors[doc] == nil {
			anchors[doc] = headingAnchors(t, doc)
		}
		assert.True(t, anchors[doc][anchor], "README links to %s#%s, a heading %s does not have", doc, anchor, doc)
	}
	for _, m := range pkgLinkRE.FindAllStringSubmatch(string(readme), -1) {
		names := packageNames(t, m[1])
		if assert.NotNil(t, names, "README links to the package %s, which is not in the repository", m[1]) && m[2] != "" {
			assert.True(t, names[m[2]], "README links to %s#%s, a name the package does not declare", m[1], m[2])
		}
	}
	for _, m := range dirLinkRE.FindAllStringSubmatch(string(readme), -1) {
		_, err := os.Stat(filepath.Join(root, m[1]))
		assert.NoError(t, err, "README links to %s", m[1])
	}
	require.NotEmpty(t, docLinkRE.FindAllString(string(readme), -1), "no link to a document's heading: the pattern is stale")
	require.NotEmpty(t, pkgLinkRE.FindAllString(string(readme), -1), "no link to pkg.go.dev: the pattern is stale")
}

// headingAnchors returns the anchors GitHub gives the headings of doc:
// lower case, spaces to hyphens, punctuation other than hyphens and
// underscores dropped. Headings inside fenced blocks are not headings.
func headingAnchors(t *testing.T, doc string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, doc))
	require.NoError(t, err)
	out := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	require.NoError(t, sc.Err())
	return out
}

// packageNames returns the top-level names declared by the Go files, tests
// aside, of the repository's directory dir; nil if it has none.
func packageNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		return nil
	}
	var out map[string]bool
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, dir, name), nil, 0)
		require.NoError(t, err)
		if out == nil {
			out = map[string]bool{}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					out[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						out[s.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range s.Names {
							out[n.Name] = true
						}
					}
				}
			}
		}
	}
	return out
}
