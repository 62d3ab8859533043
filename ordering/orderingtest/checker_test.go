package orderingtest_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

type record struct {
	key string
	seq int
}

func recs(key string, seqs ...int) []record {
	out := make([]record, len(seqs))
	for i, s := range seqs {
		out[i] = record{key, s}
	}
	return out
}

func TestChecker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		redelivery bool
		expect     map[string]int
		records    []record
		want       orderingtest.KeyReport // for key "k"; Records is counted from records
		ok         bool
	}{
		{name: "clean", records: recs("k", 1, 2, 3), ok: true},
		{name: "clean with expectation", expect: map[string]int{"k": 3}, records: recs("k", 1, 2, 3), ok: true,
			want: orderingtest.KeyReport{Expected: 3}},
		{name: "duplicate", records: recs("k", 1, 2, 2, 3),
			want: orderingtest.KeyReport{Duplicates: []int{2}}},
		{name: "out of order", records: recs("k", 1, 3, 2),
			want: orderingtest.KeyReport{OutOfOrder: []int{2}}},
		{name: "gap below the highest", records: recs("k", 1, 3),
			want: orderingtest.KeyReport{Missing: []int{2}}},
		{name: "missing at the end", expect: map[string]int{"k": 4}, records: recs("k", 1, 2),
			want: orderingtest.KeyReport{Expected: 4, Missing: []int{3, 4}}},
		{name: "expected but never recorded", expect: map[string]int{"k": 2},
			want: orderingtest.KeyReport{Expected: 2, Missing: []int{1, 2}}},
		{name: "beyond the expected count", expect: map[string]int{"k": 2}, records: recs("k", 1, 2, 3),
			want: orderingtest.KeyReport{Expected: 2, Unexpected: []int{3}}},
		{name: "below one", records: recs("k", 0, 1),
			want: orderingtest.KeyReport{Unexpected: []int{0}}},
		{name: "redelivered tail rejected when strict", records: recs("k", 1, 2, 3, 2, 3),
			want: orderingtest.KeyReport{Duplicates: []int{2, 3}}},
		{name: "redelivered tail allowed", redelivery: true, records: recs("k", 1, 2, 3, 2, 3, 4), ok: true,
			want: orderingtest.KeyReport{Duplicates: []int{2, 3}}},
		{name: "immediate duplicate allowed", redelivery: true, records: recs("k", 1, 1, 2), ok: true,
			want: orderingtest.KeyReport{Duplicates: []int{1}}},
		{name: "redelivered tail with a hole", redelivery: true, records: recs("k", 1, 2, 3, 1, 3),
			want: orderingtest.KeyReport{Duplicates: []int{1, 3}, OutOfOrder: []int{3}}},
		{name: "skip ahead when redelivery allowed", redelivery: true, records: recs("k", 1, 3, 2),
			want: orderingtest.KeyReport{OutOfOrder: []int{3}}},
		{name: "other keys do not interfere", records: append(recs("k", 1, 2), recs("other", 1)...), ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []orderingtest.CheckerOption
			if tc.redelivery {
				opts = append(opts, orderingtest.AllowRedelivery())
			}
			c := orderingtest.NewChecker(opts...)
			for k, n := range tc.expect {
				c.Expect(k, n)
			}
			for _, r := range tc.records {
				c.Record(r.key, r.seq)
			}
			rep := c.Report()
			got, found := rep.Key("k")
			require.True(t, found)
			want := tc.want
			for _, r := range tc.records {
				if r.key == "k" {
					want.Records++
				}
			}
			assert.Equal(t, want.Duplicates, got.Duplicates, "duplicates")
			assert.Equal(t, want.OutOfOrder, got.OutOfOrder, "out of order")
			assert.Equal(t, want.Missing, got.Missing, "missing")
			assert.Equal(t, want.Unexpected, got.Unexpected, "unexpected")
			assert.Equal(t, want.Expected, got.Expected)
			assert.Equal(t, want.Records, got.Records)
			assert.Equal(t, tc.ok, got.OK())
			assert.Equal(t, tc.ok, rep.OK())
			if tc.ok {
				assert.NoError(t, rep.Err())
			} else {
				assert.ErrorIs(t, rep.Err(), orderingtest.ErrViolation)
				assert.Contains(t, rep.Err().Error(), "k:")
			}
		})
	}
}

func TestZeroValueIsStrict(t *testing.T) {
	t.Parallel()
	var c orderingtest.Checker
	c.Record("k", 2)
	c.Record("k", 1)
	rep := c.Report()
	require.False(t, rep.OK())
	k, _ := rep.Key("k")
	assert.Equal(t, []int{1}, k.OutOfOrder)
	_, found := rep.Key("absent")
	assert.False(t, found)
}

// TestConcurrentRecords records from many goroutines at once, as handlers
// do; run with -race. Each key is recorded by one goroutine, in order, so
// the report must be clean and complete.
func TestConcurrentRecords(t *testing.T) {
	t.Parallel()
	const keys, perKey = 50, 200
	c := orderingtest.NewChecker()
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprint("key-", k)
		c.Expect(key, perKey)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 1; seq <= perKey; seq++ {
				c.Record(key, seq)
			}
		}()
	}
	wg.Wait()
	rep := c.Report()
	require.NoError(t, rep.Err())
	assert.Len(t, rep.Keys, keys)
	assert.Equal(t, keys*perKey, rep.Records)
}

func TestReportText(t *testing.T) {
	t.Parallel()
	c := orderingtest.NewChecker()
	c.Expect("a", 2)
	c.Record("a", 1)
	c.Record("a", 2)
	c.Expect("b", 12)
	for seq := 12; seq >= 1; seq-- {
		c.Record("b", seq)
	}
	rep := c.Report()
	assert.Equal(t, "a: 2 records, 2 expected: ok\n"+
		"b: 12 records, 12 expected: 11 out of order [11 10 9 8 7 6 5 4 3 2 ...]\n"+
		"total: 2 keys (1 violating order), 14 records: 11 out of order, 0 missing, 0 unexpected, 0 duplicates",
		rep.String())
	assert.EqualError(t, rep.Err(), "orderingtest: order violated: 2 keys (1 violating order), 14 records: "+
		"11 out of order, 0 missing, 0 unexpected, 0 duplicates\n  b: 12 records, 12 expected: 11 out of order [11 10 9 8 7 6 5 4 3 2 ...]")
}
