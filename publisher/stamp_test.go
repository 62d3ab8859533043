package publisher_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/ordering"
	"github.com/keyorder/keyorder/ordering/orderingtest"
	"github.com/keyorder/keyorder/publisher"
)

// stamps returns the stamp of each message the server stored for e's
// topic with ordering key key, in publish order.
func (e fakeEnv) stamps(t *testing.T, key string) []ordering.Stamp {
	t.Helper()
	var out []ordering.Stamp
	for _, m := range e.srv.Messages("projects/" + harness.Project + "/topics/" + e.topic) {
		if m.OrderingKey != key {
			continue
		}
		st, err := ordering.ParseStamp(m.Attributes)
		require.NoError(t, err, "message %s", m.ID)
		out = append(out, st)
	}
	return out
}

// run returns the stamps that n numbers of epoch give, from first.
func run(producer string, epoch uint32, first, n int) []ordering.Stamp {
	out := make([]ordering.Stamp, n)
	for i := range out {
		out[i] = ordering.Stamp{Producer: producer, Seq: ordering.MakeSeq(epoch, uint32(first+i))}
	}
	return out
}

// TestStampsPerKey checks S12's publisher side: every keyed message carries
// the publisher's producer ID and its number in the key's sequence, from 1
// and without a hole, whatever the other keys do; an unkeyed message
// carries none.
func TestStampsPerKey(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, nil)
	require.Len(t, p.Producer(), 26, "a random ID: 16 bytes in base32")

	keys := []string{"a", "b", "c"}
	const perKey = 40
	var results []*publisher.Result
	for i := 0; i < perKey; i++ {
		for _, k := range keys {
			results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte(fmt.Sprint(i))}, publisher.WithOrderingKey(k)))
		}
		results = append(results, p.Publish(ctx, &publisher.Message{Data: []byte("unkeyed")}))
	}
	for i, r := range results {
		_, err := r.Get(ctx)
		require.NoError(t, err, "result %d", i)
	}
	for _, k := range keys {
		st := e.stamps(t, k)
		require.Len(t, st, perKey, k)
		epoch, n := ordering.SplitSeq(st[0].Seq)
		assert.EqualValues(t, 1, n, "%s: the first number of an epoch is 1", k)
		assert.Equal(t, run(p.Producer(), epoch, 1, perKey), st, k)
	}
	for _, st := range e.stamps(t, "") {
		assert.Zero(t, st, "an unkeyed message is not stamped")
	}

	// A key that went idle keeps its counter: its numbers go on.
	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("later")}, publisher.WithOrderingKey("a")).Get(ctx)
	require.NoError(t, err)
	st := e.stamps(t, "a")
	epoch, _ := ordering.SplitSeq(st[0].Seq)
	assert.Equal(t, run(p.Producer(), epoch, perKey+1, 1)[0], st[perKey])
}

// TestWithoutStamps checks that stamping can be turned off, and that the
// caller may then set the stamp attributes itself.
func TestWithoutStamps(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, nil, publisher.WithoutStamps())
	assert.Empty(t, p.Producer())

	_, err := p.Publish(ctx, &publisher.Message{Data: []byte("plain")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.NoError(t, err)
	own := ordering.Stamp{Producer: "by-hand", Seq: 7}
	attrs := map[string]string{}
	own.Put(attrs)
	_, err = p.Publish(ctx, &publisher.Message{Data: []byte("by hand"), Headers: attrs}, publisher.WithOrderingKey("k")).Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, []ordering.Stamp{{}, own}, e.stamps(t, "k"))
	assert.Zero(t, publisher.KeptCounters(p), "no counters without stamps")
}

// TestWithProducerID checks the stable producer ID: each Publisher stamps
// it with an incarnation of its own, so that two runs of a process never
// share a sequence; a bad ID is refused.
func TestWithProducerID(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	p1 := e.newPublisher(t, nil, publisher.WithProducerID("orders-api"))
	p2 := e.newPublisher(t, nil, publisher.WithProducerID("orders-api"))
	for _, p := range []*publisher.Publisher{p1, p2} {
		prefix, incarnation, ok := strings.Cut(p.Producer(), "#")
		require.True(t, ok, p.Producer())
		assert.Equal(t, "orders-api", prefix)
		assert.Len(t, incarnation, 26)
	}
	assert.NotEqual(t, p1.Producer(), p2.Producer(), "a restart is a new producer")

	_, err := p1.Publish(ctx, &publisher.Message{Data: []byte("x")}, publisher.WithOrderingKey("k")).Get(ctx)
	require.NoError(t, err)
	assert.Equal(t, p1.Producer(), e.stamps(t, "k")[0].Producer)

	for _, id := range []string{"", strings.Repeat("x", publisher.MaxProducerIDBytes+1), "bad\xff"} {
		_, err := publisher.New(e.client, e.topic, publisher.WithProducerID(id))
		require.ErrorIs(t, err, publisher.ErrInvalidConfig, "%q", id)
	}
	_, err = publisher.New(e.client, e.topic, publisher.WithProducerID(strings.Repeat("x", publisher.MaxProducerIDBytes)))
	require.NoError(t, err, "the longest ID fits the stamp")
}

// TestStampCountsAgainstLimits checks that the stamp counts against P6's
// limits: a keyed message whose headers leave no room for the stamp's two
// attributes is refused before sending, as is one that sets a stamp
// attribute itself, while the same headers pass without a key or without
// stamps.
func TestStampCountsAgainstLimits(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	stamped := e.newPublisher(t, nil)
	plain := e.newPublisher(t, nil, publisher.WithoutStamps())

	headers := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("h%d", i)] = "v"
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		p       *publisher.Publisher
		key     string
		headers map[string]string
		want    error
	}{
		{"room for the stamp", stamped, "k", headers(publisher.MaxAttributes - ordering.StampAttributes), nil},
		{"no room for the stamp", stamped, "k", headers(publisher.MaxAttributes - ordering.StampAttributes + 1), publisher.ErrTooManyAttributes},
		{"unkeyed is not stamped", stamped, "", headers(publisher.MaxAttributes), nil},
		{"without stamps", plain, "k", headers(publisher.MaxAttributes), nil},
		{"producer header", stamped, "k", map[string]string{ordering.ProducerAttribute: "mine"}, publisher.ErrStampAttribute},
		{"seq header", stamped, "k", map[string]string{ordering.SeqAttribute: "1"}, publisher.ErrStampAttribute},
		{"stamp header", stamped, "k", map[string]string{ordering.StampAttribute: "0.1@mine"}, publisher.ErrStampAttribute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := "limits/" + tc.name
			_, err := tc.p.Publish(ctx, &publisher.Message{Data: []byte(data), Headers: tc.headers}, publisher.WithOrderingKey(tc.key)).Get(ctx)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.want)
			var ve *publisher.ValidationError
			require.True(t, errors.As(err, &ve), "got %T", err)
			for _, m := range e.srv.Messages("projects/" + harness.Project + "/topics/" + e.topic) {
				assert.NotEqual(t, data, string(m.Data), "a refused message never reaches the server")
			}
		})
	}
}

// TestNumbersNeverReused checks that a key whose counter was dropped, as
// P7 requires of idle keys, starts again in a higher epoch: its numbers go
// on increasing, and none is given twice.
func TestNumbersNeverReused(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	p := e.newPublisher(t, nil)
	publisher.SetCounterWindow(p, 1)
	pub := func(key string) {
		t.Helper()
		_, err := p.Publish(ctx, &publisher.Message{Data: []byte(key)}, publisher.WithOrderingKey(key)).Get(ctx)
		require.NoError(t, err)
	}

	for range 3 {
		pub("k")
	}
	// Enough other keys that k's counter leaves both generations of its
	// shard whichever shard each key falls in; each goes idle at once.
	for i := range 400 {
		pub(fmt.Sprintf("other-%d", i))
	}
	assert.LessOrEqual(t, publisher.KeptCounters(p), 2*32, "kept counters are bounded")
	for range 2 {
		pub("k")
	}

	st := e.stamps(t, "k")
	require.Len(t, st, 5)
	first, _ := ordering.SplitSeq(st[0].Seq)
	second, _ := ordering.SplitSeq(st[3].Seq)
	assert.Greater(t, second, first, "a new counter takes a higher epoch")
	assert.Equal(t, append(run(p.Producer(), first, 1, 3), run(p.Producer(), second, 1, 2)...), st)
}

// TestRetryRestamps checks that Retry gives a failed tail new numbers,
// after every number given before: the service may have stored the failed
// messages, and their numbers must not name anything else.
func TestRetryRestamps(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t)
	ctx := testContext(t)
	hold := e.holdThenFail("K-2", 1)
	p := e.newPublisher(t, []*orderingtest.Fault{hold}, publisher.WithPublishSettings(settings(1)))

	failing, tail := failTail(t, ctx, e, p, hold)
	retried, err := p.Retry(ctx, append([]*publisher.Result{failing}, tail...)...)
	require.NoError(t, err)
	for i, r := range retried {
		_, err := r.Get(ctx)
		require.NoError(t, err, "retry %d", i)
	}
	require.Equal(t, []string{"K-0", "K-1", "K-2", "K-3", "K-4", "K-5", "K-6", "K-7"}, e.storedData("K"))
	st := e.stamps(t, "K")
	epoch, _ := ordering.SplitSeq(st[0].Seq)
	// K-0 and K-1 took 1 and 2; K-2..K-7 took 3..8 and failed; the retry
	// numbers them 9..14.
	assert.Equal(t, append(run(p.Producer(), epoch, 1, 2), run(p.Producer(), epoch, 9, 6)...), st)
}
