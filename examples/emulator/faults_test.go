package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func TestParseFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		ok   bool
		want func(t *testing.T, f faultSpec)
	}{
		{spec: "break-streams", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Equal(t, kindBreakStreams, f.kind)
			assert.Empty(t, f.sub)
			assert.Zero(t, f.at)
			assert.Zero(t, f.every)
		}},
		{spec: "break-streams,sub=orders-billing,at=1s,every=10s", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Equal(t, "orders-billing", f.sub)
			assert.Equal(t, time.Second, f.at)
			assert.Equal(t, 10*time.Second, f.every)
		}},
		{spec: "fail-publish", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Nil(t, f.match, "every message")
			assert.Equal(t, codes.Unavailable, f.code)
			assert.Equal(t, 1, f.times)
		}},
		{spec: "lose-publish-response,key=a%2Cb,code=deadline-exceeded,times=0", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Equal(t, "a,b", f.key, "percent-decoded")
			assert.Equal(t, codes.DeadlineExceeded, f.code)
			assert.Zero(t, f.times, "until removed")
		}},
		{spec: "fail-acks,data=x,failure=transient", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Equal(t, orderingtest.TransientAckFailure, f.failure)
			assert.NotNil(t, f.match)
		}},
		{spec: "hold-publish,key=k,for=3s", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Equal(t, 3*time.Second, f.lifetime)
		}},
		{spec: "redeliver-key,key=c-01,sub=projects/p/subscriptions/s", ok: true, want: func(t *testing.T, f faultSpec) {
			assert.Equal(t, "c-01", f.key)
			assert.Equal(t, "projects/p/subscriptions/s", f.sub)
		}},
		{spec: "explode"},
		{spec: ""},
		{spec: "redeliver-key"},               // needs key
		{spec: "break-streams,key=k"},         // not taken
		{spec: "hold-publish,times=2"},        // not taken
		{spec: "fail-publish,key=k,data=d"},   // exclusive
		{spec: "fail-publish,key=a,key=b"},    // twice
		{spec: "fail-publish,code=teapot"},    // no such code
		{spec: "fail-publish,code=ok"},        // not a failure
		{spec: "fail-publish,times=-1"},       // negative
		{spec: "fail-acks,failure=sometimes"}, // neither
		{spec: "break-streams,every=0s"},      // never ends
		{spec: "break-streams,at=-1s"},        // in the past
		{spec: "break-streams,at=soon"},       // not a duration
		{spec: "fail-publish,key"},            // no value
		{spec: "fail-publish,key=%zz"},        // bad escape
		{spec: "drop-acks,for=0s"},            // gone at once
	} {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := parseFault(tc.spec)
			if !tc.ok {
				require.ErrorIs(t, err, errBadFault)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.spec, f.text)
			tc.want(t, f)
		})
	}
}
