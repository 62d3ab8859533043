package orderingtest

import (
	"fmt"
	"slices"
	"strings"
)

// listed caps how many sequences or keys a report prints.
const listed = 10

// A Report is what a Checker found, per key and in total.
type Report struct {
	Keys       []KeyReport // sorted by key
	Records    int         // records of every key
	Redelivery bool        // made with AllowRedelivery
}

// A KeyReport is what a Checker found for one key. Each list holds
// sequences, in the order they were recorded.
type KeyReport struct {
	Key      string
	Records  int
	Expected int // 0 if Expect was not called for the key
	// Duplicates lists sequences recorded again, once per extra record.
	// They are violations unless the report allows redelivery.
	Duplicates []int
	// OutOfOrder lists records that arrived after a later message of
	// their key, or, allowing redelivery, that skipped ahead.
	OutOfOrder []int
	// Missing lists sequences never recorded: up to the expected count, or
	// up to the highest recorded.
	Missing []int
	// Unexpected lists sequences below 1 or beyond the expected count.
	Unexpected []int

	redelivery bool
}

// OK reports whether the key's records hold no violation.
func (k KeyReport) OK() bool { return k.violations() == 0 }

func (k KeyReport) violations() int {
	n := len(k.OutOfOrder) + len(k.Missing) + len(k.Unexpected)
	if !k.redelivery {
		n += len(k.Duplicates)
	}
	return n
}

func (r *Report) sort() {
	slices.SortFunc(r.Keys, func(a, b KeyReport) int { return strings.Compare(a.Key, b.Key) })
}

// Key returns the report of one key, and false if nothing about it was
// recorded or expected.
func (r Report) Key(key string) (KeyReport, bool) {
	i, ok := slices.BinarySearchFunc(r.Keys, key, func(k KeyReport, key string) int { return strings.Compare(k.Key, key) })
	if !ok {
		return KeyReport{}, false
	}
	return r.Keys[i], true
}

// OK reports whether no key holds a violation.
func (r Report) OK() bool { return r.Violations() == 0 }

// Violations counts the violating records and missing messages of all keys.
func (r Report) Violations() int {
	n := 0
	for _, k := range r.Keys {
		n += k.violations()
	}
	return n
}

// Err returns nil if the report is OK, and otherwise an error that wraps
// ErrViolation and describes the total and the first violating keys.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	shown := 0
	for _, k := range r.Keys {
		if k.OK() {
			continue
		}
		if shown == listed {
			b.WriteString("\n  ...")
			break
		}
		b.WriteString("\n  ")
		b.WriteString(k.String())
		shown++
	}
	return fmt.Errorf("%w: %s%s", ErrViolation, r.Summary(), b.String())
}

// Summary is the one-line total: keys, records, and violations by kind.
func (r Report) Summary() string {
	var dup, ooo, miss, unexp, bad int
	for _, k := range r.Keys {
		dup += len(k.Duplicates)
		ooo += len(k.OutOfOrder)
		miss += len(k.Missing)
		unexp += len(k.Unexpected)
		if !k.OK() {
			bad++
		}
	}
	s := fmt.Sprintf("%d keys (%d violating order), %d records: %d out of order, %d missing, %d unexpected, %d duplicates",
		len(r.Keys), bad, r.Records, ooo, miss, unexp, dup)
	if r.Redelivery {
		s += " (redelivery allowed)"
	}
	return s
}

// String lists every key, one line each, then the total.
func (r Report) String() string {
	var b strings.Builder
	for _, k := range r.Keys {
		b.WriteString(k.String())
		b.WriteByte('\n')
	}
	b.WriteString("total: ")
	b.WriteString(r.Summary())
	return b.String()
}

// String describes the key on one line.
func (k KeyReport) String() string {
	s := fmt.Sprintf("%s: %d records", k.Key, k.Records)
	if k.Expected > 0 {
		s += fmt.Sprintf(", %d expected", k.Expected)
	}
	var parts []string
	for _, l := range []struct {
		what string
		seqs []int
	}{
		{"out of order", k.OutOfOrder},
		{"missing", k.Missing},
		{"unexpected", k.Unexpected},
		{"duplicates", k.Duplicates},
	} {
		if len(l.seqs) > 0 {
			parts = append(parts, fmt.Sprintf("%d %s %s", len(l.seqs), l.what, seqList(l.seqs)))
		}
	}
	switch {
	case len(parts) == 0:
		return s + ": ok"
	case k.OK():
		return s + ": ok, " + strings.Join(parts, ", ")
	}
	return s + ": " + strings.Join(parts, ", ")
}

func seqList(seqs []int) string {
	if len(seqs) > listed {
		return strings.Trim(fmt.Sprint(seqs[:listed]), "]") + " ...]"
	}
	return fmt.Sprint(seqs)
}
