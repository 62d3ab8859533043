// Package doccheck keeps the project's documents true to its code. It has
// no code of its own: its tests read README.md and FIGURES.md, and the
// source of the packages they describe, and fail where the two disagree.
package doccheck
