package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Keys, message IDs, errors and askers come from whoever can publish to
// the subscription's topics, so parkctl prints none of them raw: a key
// holding terminal escapes would otherwise change the operator's terminal,
// erase a line, or forge a table row.

// inert returns s as it may be printed: unchanged when every rune is a
// printable character other than a quote or a backslash, and no space
// leads or ends it; else quoted, with Go's escapes.
func inert(s string) string {
	if s != "" && strings.TrimSpace(s) == s && !strings.ContainsFunc(s, needsQuote) {
		return s
	}
	return strconv.Quote(s)
}

func needsQuote(r rune) bool {
	return r == '"' || r == '\\' || r == '\t' || !unicode.IsPrint(r) && r != ' '
}

// escapeControls escapes the control characters of s, newlines included,
// leaving the rest as it is: for a message that reads as a sentence.
func escapeControls(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// inertArgs escapes the control characters of the strings and errors
// among args, for a message's format.
func inertArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case error:
			out[i] = escapeControls(v.Error())
		case string:
			out[i] = escapeControls(v)
		case fmt.Stringer:
			out[i] = escapeControls(v.String())
		default:
			out[i] = a
		}
	}
	return out
}

// inertJSON escapes, in a JSON text, the control characters encoding/json
// leaves raw: DEL and the C1 controls, which some terminals obey. They
// can stand only inside strings, where \u00XX means the same.
func inertJSON(line []byte) []byte {
	if !bytes.ContainsFunc(line, func(r rune) bool { return r == 0x7f || r >= 0x80 && r < 0xa0 }) {
		return line
	}
	var b bytes.Buffer
	for _, r := range string(line) {
		if r == 0x7f || r >= 0x80 && r < 0xa0 {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.Bytes()
}
