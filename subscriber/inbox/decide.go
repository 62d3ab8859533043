package inbox

import "github.com/keyorder/keyorder/ordering"

// A step is what the record of a (key, producer) makes of a message's
// number: the whole of the inbox's rule, pure, so that it is tested
// without a database.
type step uint8

const (
	// first: the store holds nothing of the (key, producer), so the
	// number starts its sequence, as S12's first stamp does: nothing
	// before it is missing, since the producer may have published it
	// before the inbox existed, or its record was pruned.
	first step = iota
	// next: the number after the last applied, or the first of a higher
	// epoch (the unused end of the old one is no gap).
	next
	// gap: numbers between the last applied and this one are missing,
	// from gapFrom to gapTo, within this number's epoch.
	gap
	// older: at or below the last applied: a copy, unless it is owed.
	older
)

// classify returns the step of seq after last, the highest number of the
// (key, producer) applied, 0 if none; for a gap, the missing numbers.
func classify(last, seq uint64) (s step, gapFrom, gapTo uint64) {
	switch {
	case last == 0:
		return first, 0, 0
	case seq <= last:
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
