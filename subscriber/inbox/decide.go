package inbox

import "github.com/keyorder/keyorder/ordering"

// A step is what the record of a (key, producer) makes of a message's
// number: the whole of the inbox's rule, pure, so that it is tested
// without a database.
type step uint8

const (
	// next: the number after the last applied, or number 1 of a higher
	// epoch (the unused end of the old one is no gap). With nothing
	// applied, the last is 0, so that number 1 of any epoch is the next:
	// every sequence starts at 1 (ordering.Stamp), and a first number
	// above it is a gap, never a start.
	next step = iota
	// gap: numbers between the last applied and this one are missing,
	// from gapFrom to gapTo, within this number's epoch.
	gap
	// older: at or below the last applied: a copy, unless it is owed.
	older
)

// classify returns the step of seq after last, the highest number of the
// (key, producer) applied, 0 if none; for a gap, the missing numbers.
func classify(last, seq uint64) (s step, gapFrom, gapTo uint64) {
	if seq <= last {
		return older, 0, 0
	}
	epoch, n := ordering.SplitSeq(seq)
	lastEpoch, _ := ordering.SplitSeq(last)
	switch {
	case epoch == lastEpoch && seq == last+1, epoch > lastEpoch && n == 1:
		return next, 0, 0
	case epoch == lastEpoch:
		return gap, last + 1, seq - 1
	default: // a higher epoch starts again at 1 (ordering.Stamp, Epochs)
		return gap, ordering.MakeSeq(epoch, 1), seq - 1
	}
}
