package resource_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/internal/resource"
)

func TestTopic(t *testing.T) {
	t.Parallel()
	longest := "t" + strings.Repeat("x", resource.MaxIDLen-1)
	tests := []struct {
		name string
		in   string
		ok   bool
		says string // part of the error
	}{
		{"ID", "orders", true, ""},
		{"shortest", "ord", true, ""},
		{"longest", longest, true, ""},
		{"every allowed character", "aZ09-_.~+%", true, ""},
		{"upper case start", "Orders", true, ""},
		{"goog inside", "my-goog-topic", true, ""},
		{"Goog is not goog", "Google-events", true, ""},
		{"full name", "projects/my-project/topics/orders", true, ""},

		{"empty", "", false, "is empty"},
		{"too short", "t", false, "1 characters long"},
		{"two characters", "to", false, "2 characters long"},
		{"too long", longest + "x", false, "256 characters long"},
		{"starts with a digit", "1orders", false, "not a letter"},
		{"starts with a dash", "-orders", false, "not a letter"},
		{"starts with %", "%orders", false, "not a letter"},
		{"space", "my orders", false, `' '`},
		{"slash", "a/orders", false, `'/'`},
		{"non-ASCII letter", "commandé", false, `'é'`},
		{"invalid UTF-8", "ord\xffers", false, "only letters"},
		{"goog", "goog-events", false, `"goog"`},
		{"just goog", "goog", false, `"goog"`},
		{"full name, bad ID", "projects/my-project/topics/t", false, "1 characters long"},
		{"full name, goog ID", "projects/my-project/topics/googly", false, `"goog"`},
		{"full name, empty ID", "projects/my-project/topics/", false, "is empty"},
		{"full name, empty project", "projects//topics/orders", false, "projects/PROJECT/topics/ID"},
		{"full name, a subscription", "projects/my-project/subscriptions/orders", false, "projects/PROJECT/topics/ID"},
		{"full name, too few segments", "projects/my-project/topics", false, "projects/PROJECT/topics/ID"},
		{"full name, too many segments", "projects/my-project/topics/orders/x", false, "projects/PROJECT/topics/ID"},
		{"just projects/", "projects/", false, "projects/PROJECT/topics/ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := resource.Topic(tc.in)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.says)
			assert.Contains(t, err.Error(), "topic")
		})
	}
}

func TestSubscription(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"orders-sub", "projects/p/subscriptions/orders-sub"} {
		assert.NoError(t, resource.Subscription(ok), ok)
	}
	for _, bad := range []string{"", "s", "goog-sub", "1sub", "projects/p/topics/orders-sub", "projects//subscriptions/orders-sub"} {
		err := resource.Subscription(bad)
		if assert.Error(t, err, bad) {
			assert.Contains(t, err.Error(), "subscription")
		}
	}
}

// idRule is the service's rule for an ID, written as a regular expression,
// apart from the reserved prefix.
var idRule = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$`)

// FuzzTopic checks Topic against the rule written another way: an ID is
// accepted exactly when it matches idRule and does not start with "goog",
// and a full name with a non-empty project exactly when its ID is.
func FuzzTopic(f *testing.F) {
	for _, s := range []string{"orders", "t", "goog-x", "1abc", "a b", "projects/p/topics/orders", "projects//topics/x", "commandé", strings.Repeat("a", 256)} {
		f.Add(s, "my-project")
	}
	f.Fuzz(func(t *testing.T, id, project string) {
		valid := idRule.MatchString(id) && !strings.HasPrefix(id, "goog")
		if !strings.HasPrefix(id, "projects/") { // else a full name, of its own shape
			err := resource.Topic(id)
			require.Equal(t, valid, err == nil, "%q: %v", id, err)
		}
		full := "projects/" + project + "/topics/" + id
		err := resource.Topic(full)
		if project == "" || strings.Contains(project, "/") {
			require.Error(t, err, "%q", full)
			return
		}
		require.Equal(t, valid, err == nil, "%q: %v", full, err)
	})
}
