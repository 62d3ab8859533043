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

// TestStatusPageRefusesForeignHosts: a web page the operator visits may
// point a name of its own at the page's address (DNS rebinding); its
// requests carry that name as Host, and get 421 with nothing of the
// status. IP literals, localhost and the names given by WithHosts get
// the page.
func TestStatusPageRefusesForeignHosts(t *testing.T) {
	t.Parallel()
	_, client := harness.Fake(t)
	ctx := harness.Context(t, 30*time.Second)
	sub, err := subscriber.CreateWithTopic(ctx, client, "hosts", "hosts", subscriber.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	srv := httptest.NewServer(statuspage.Handler(sub, statuspage.WithHosts("Ops.Example.com")))
	defer srv.Close()
	for _, tc := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:8080", http.StatusOK},
		{"[::1]:8080", http.StatusOK},
		{"10.1.2.3", http.StatusOK},
		{"localhost:8080", http.StatusOK},
		{"LOCALHOST.", http.StatusOK},
		{"ops.example.com:443", http.StatusOK},
		{"ops.example.com.", http.StatusOK},
		{"attacker.example:8080", http.StatusMisdirectedRequest},
		{"localhost.attacker.example", http.StatusMisdirectedRequest},
		{"127.0.0.1.nip.io", http.StatusMisdirectedRequest},
		{"example.com", http.StatusMisdirectedRequest},
	} {
		t.Run(tc.host, func(t *testing.T) {
			for _, q := range []string{"", "?format=json"} {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+q, nil)
				require.NoError(t, err)
				req.Host = tc.host
				res, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				_ = res.Body.Close()
				assert.Equal(t, tc.want, res.StatusCode, "GET %s with Host %s", q, tc.host)
				if tc.want != http.StatusOK {
					assert.NotEqual(t, "application/json", res.Header.Get("Content-Type"))
				}
			}
		})
	}
}
