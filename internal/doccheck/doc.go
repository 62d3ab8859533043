// Package doccheck keeps the project's documents true to its code. It has
// no code of its own: its tests read README.md and FIGURES.md, and the
// source of the packages they describe, and fail where the two disagree:
// a log message the code does not log, a Go block of the README that does
// not build (see snippets_test.go for how fragments are wrapped), or a
// README link to a heading, package or name that is not there.
package doccheck
