// Package structure measures the shape of the subscriber packages, the
// figures issue 33 sets targets for. It has no code of its own: its test
// parses subscriber/... with go/parser, logs the figures (run
// `go test -v ./internal/structure`) and fails where a figure that holds
// today slips back.
package structure
