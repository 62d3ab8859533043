package statuspage_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/subscriber"
	"github.com/keyorder/keyorder/subscriber/statuspage"
)

// TestStatusPageForbidsFramingAndSniffing: the HTML, the JSON and a
// refusal each tell the browser not to frame the page on another site
// (X-Frame-Options, CSP frame-ancestors) and not to sniff its type.
func TestStatusPageForbidsFramingAndSniffing(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := harness.Context(t, 30*time.Second)
	sub, err := subscriber.CreateWithTopic(ctx, client, "headers", "headers", subscriber.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	srv := httptest.NewServer(statuspage.Handler(sub))
	defer srv.Close()
	for _, tc := range []struct{ name, method, query string }{
		{"HTML", http.MethodGet, ""}, {"JSON", http.MethodGet, "?format=json"}, {"refused", http.MethodPost, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, tc.method, srv.URL+tc.query, nil)
			require.NoError(t, err)
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = res.Body.Close()
			assert.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
			assert.Equal(t, "frame-ancestors 'none'", res.Header.Get("Content-Security-Policy"))
			assert.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		})
	}
}
