package inbox

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/keyorder/keyorder/ordering"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	seq := ordering.MakeSeq
	for _, tc := range []struct {
		name     string
		last     uint64
		seq      uint64
		want     step
		from, to uint64
	}{
		{"nothing recorded, number 1", 0, seq(0, 1), next, 0, 0},
		{"nothing recorded, number 1 of a later epoch", 0, seq(2, 1), next, 0, 0},
		{"nothing recorded, a later number is a gap from 1", 0, seq(0, 4), gap, seq(0, 1), seq(0, 3)},
		{"nothing recorded, a later number of a later epoch is a gap from its 1", 0, seq(2, 40), gap, seq(2, 1), seq(2, 39)},
		{"the next number", seq(0, 4), seq(0, 5), next, 0, 0},
		{"the same number: a copy", seq(0, 4), seq(0, 4), older, 0, 0},
		{"a lower number: a copy or owed", seq(0, 4), seq(0, 2), older, 0, 0},
		{"one missing", seq(0, 4), seq(0, 6), gap, seq(0, 5), seq(0, 5)},
		{"several missing", seq(1, 4), seq(1, 9), gap, seq(1, 5), seq(1, 8)},
		{"a higher epoch from 1: the old epoch's end is no gap", seq(1, 4), seq(3, 1), next, 0, 0},
		{"a higher epoch from 3: 1 and 2 of it missing", seq(1, 4), seq(3, 3), gap, seq(3, 1), seq(3, 2)},
		{"a lower epoch: older", seq(3, 1), seq(2, 9), older, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, to := classify(tc.last, tc.seq)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.from, from)
			assert.Equal(t, tc.to, to)
		})
	}
}
