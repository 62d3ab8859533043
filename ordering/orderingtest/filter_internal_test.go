package orderingtest

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFilterMatches(t *testing.T) {
	t.Parallel()
	msg := func(attrs ...string) *pubsubpb.PubsubMessage {
		m := &pubsubpb.PubsubMessage{Attributes: map[string]string{}}
		for i := 0; i < len(attrs); i += 2 {
			m.Attributes[attrs[i]] = attrs[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		filter string
		msg    *pubsubpb.PubsubMessage
		want   bool
	}{
		{``, msg(), true},
		{`attributes.kind = "park"`, msg("kind", "park"), true},
		{`attributes.kind = "park"`, msg("kind", "parked"), false},
		{`attributes.kind = "park"`, msg(), false},
		{`attributes:kind`, msg("kind", ""), true},
		{`attributes:kind`, msg("other", "x"), false},
		{`attributes.a = "1" AND attributes.b = "2"`, msg("a", "1", "b", "2"), true},
		{`attributes.a = "1" AND attributes.b = "2"`, msg("a", "1", "b", "3"), false},
		{`attributes.a = "1" OR attributes.b = "2"`, msg("b", "2"), true},
		{`attributes.a = "1" OR attributes.b = "2" OR attributes:c`, msg("c", "x"), true},
		{`attributes.a = "1" OR attributes.b = "2"`, msg("a", "2", "b", "1"), false},
		{`attributes."key.with dots" = "v \"q\""`, msg("key.with dots", `v "q"`), true},
		{`attributes.keyorder-park-id="p1"`, msg("keyorder-park-id", "p1"), true},
	} {
		f, err := parseFilter(tc.filter)
		require.NoError(t, err, tc.filter)
		assert.Equal(t, tc.want, f.matches(tc.msg), "%s on %v", tc.filter, tc.msg.Attributes)
	}
}

func TestFilterRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		filter string
		code   codes.Code
	}{
		{`attributes.a = "1" AND attributes.b = "2" OR attributes:c`, codes.InvalidArgument},
		{`attributes.a = 1`, codes.InvalidArgument},
		{`attributes.a = "1`, codes.InvalidArgument},
		{`attributes.a`, codes.InvalidArgument},
		{`attributes`, codes.InvalidArgument},
		{`attrs.a = "1"`, codes.InvalidArgument},
		{`attributes.a = "1" XOR attributes:b`, codes.InvalidArgument},
		{`attributes.a = "1" AND`, codes.InvalidArgument},
		{`attributes.a = "` + strings.Repeat("x", maxFilterBytes) + `"`, codes.InvalidArgument},
		{`NOT attributes:a`, codes.Unimplemented},
		{`-attributes:a`, codes.Unimplemented},
		{`attributes.a != "1"`, codes.Unimplemented},
		{`(attributes:a OR attributes:b) AND attributes:c`, codes.Unimplemented},
		{`hasPrefix(attributes.a, "x")`, codes.Unimplemented},
	} {
		_, err := parseFilter(tc.filter)
		assert.Equal(t, tc.code, status.Code(err), "%s: %v", tc.filter, err)
	}
}
