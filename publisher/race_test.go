//go:build race

package publisher_test

// raceEnabled reports whether the race detector is on: it slows RPCs
// tenfold, so scale tests shrink under it.
const raceEnabled = true
