package doccheck

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// docs are the documents that list log messages.
var docs = []string{"README.md", "FIGURES.md"}

// sources maps each directory whose logs the documents list to the
// prefix its messages begin with.
var sources = map[string]string{
	"publisher":        "keyorder/publisher: ",
	"publisher/outbox": "keyorder/outbox: ",
	"subscriber":       "keyorder/subscriber: ",
}

// A document writes a log message in full, in backticks, prefix included:
// `keyorder/subscriber: key parked`. In a table whose first column holds
// one such message, the second column gives its level, and may name
// several: "Info for the first copy of a run, Debug for the rest".
var (
	messageRE = regexp.MustCompile("`(keyorder/[a-z]+: [^`]+)`")
	levelRE   = regexp.MustCompile(`\b(Debug|Info|Warn|Error)\b`)
)

// A mention is a log message written in a document.
type mention struct {
	where string // file:line
	msg   string
	// levels is set when the mention is a table row, which gives the
	// levels; nil elsewhere.
	levels levels
}

// TestLogMessagesDocumented checks that every log message the documents
// name is one the code logs, word for word, at the levels they give, and
// that every message the code logs at Warn or Error is in a table of
// theirs, so that an alert written from the documents matches the logs.
func TestLogMessagesDocumented(t *testing.T) {
	t.Parallel()
	code := map[string]levels{}
	for dir, prefix := range sources {
		for msg, lv := range logged(t, filepath.Join(root, dir)) {
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("%s logs %q, without the prefix %q its other messages have", dir, msg, prefix)
			}
			code[msg] = lv
		}
	}
	if len(code) == 0 {
		t.Fatal("found no log message in the source")
	}

	tabled := map[string]bool{}
	for _, doc := range docs {
		for _, m := range mentions(t, doc) {
			lv, ok := code[m.msg]
			switch {
			case !ok:
				t.Errorf("%s: `%s` is not a message the code logs", m.where, m.msg)
			case m.levels != nil && !maps.Equal(m.levels, lv):
				t.Errorf("%s: `%s` is logged at %v, not %v", m.where, m.msg, lv, m.levels)
			case m.levels != nil:
				tabled[m.msg] = true
			}
		}
	}
	for msg, lv := range code {
		if (lv["Warn"] || lv["Error"]) && !tabled[msg] {
			t.Errorf("`%s`, logged at %v, is in no table of %s", msg, lv, strings.Join(docs, " or "))
		}
	}
}

// mentions returns the log messages doc writes, in its order.
func mentions(t *testing.T, doc string) []mention {
	t.Helper()
	f, err := os.Open(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []mention
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		where := fmt.Sprintf("%s:%d", doc, n)
		var cells []string
		if strings.HasPrefix(line, "|") {
			cells = strings.Split(strings.ReplaceAll(strings.Trim(line, "| "), `\|`, "\x00"), "|")
		}
		for _, sm := range messageRE.FindAllStringSubmatch(line, -1) {
			m := mention{where: where, msg: sm[1]}
			if len(cells) > 0 && strings.Contains(cells[0], sm[0]) {
				if strings.TrimSpace(cells[0]) != sm[0] || len(cells) < 2 {
					t.Errorf("%s: a table row gives one message alone in its first column, then its level", where)
				}
				m.levels = levels{}
				if len(cells) > 1 {
					for _, l := range levelRE.FindAllString(cells[1], -1) {
						m.levels[l] = true
					}
				}
			}
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
