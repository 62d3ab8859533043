// Package structure measures the shape of the subscriber packages, the
// figures the package layout is held to. It has no code of its own: its test
// parses subscriber/... with go/parser, logs the figures (run
// `go test -v ./internal/structure`): lines per package, files over 500
// lines, the files holding each type's methods, and the files that write
// a type's fields (a syntactic measure, by field names only one type of
// the package declares), and the files that the way of one pull delivery
// and of one push request cross, from lists of function names its test
// keeps (way_test.go). It fails where a figure slips back: a non-test
// file over 500 lines, or a type's methods in more files than today, or a
// name of a way's list that the code no longer declares.
package structure
