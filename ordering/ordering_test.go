package ordering_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyorder/keyorder/ordering"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		want error
	}{
		{"empty is unordered", "", nil},
		{"ascii", "customer-42", nil},
		{"multibyte", "клиент-42", nil},
		{"exactly the limit", strings.Repeat("k", ordering.MaxKeyBytes), nil},
		{"multibyte at the limit", strings.Repeat("é", ordering.MaxKeyBytes/2), nil},
		{"one byte over", strings.Repeat("k", ordering.MaxKeyBytes+1), ordering.ErrKeyTooLong},
		{"multibyte over in bytes, not in runes", strings.Repeat("é", ordering.MaxKeyBytes/2+1), ordering.ErrKeyTooLong},
		{"invalid utf8", "abc\xff", ordering.ErrKeyNotUTF8},
		{"truncated rune", "é"[:1], ordering.ErrKeyNotUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := ordering.Validate(tt.key)
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			// Each failure matches its own sentinel only.
			for _, other := range []error{ordering.ErrKeyTooLong, ordering.ErrKeyNotUTF8} {
				if other != tt.want {
					assert.False(t, errors.Is(err, other), "%v also matches %v", err, other)
				}
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	h := map[string]string{ordering.Header: "from-header", "other": "x"}
	tests := []struct {
		name       string
		call       string
		headers    map[string]string
		defaultKey string
		want       string
	}{
		{"call wins over header and default", "from-call", h, "from-default", "from-call"},
		{"header wins over default", "", h, "from-default", "from-header"},
		{"default when nothing else", "", map[string]string{"other": "x"}, "from-default", "from-default"},
		{"nil headers", "", nil, "from-default", "from-default"},
		{"empty header falls through", "", map[string]string{ordering.Header: ""}, "from-default", "from-default"},
		{"unordered when all empty", "", nil, "", ""},
		{"call with no default", "from-call", nil, "", "from-call"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tt.want, ordering.Resolve(tt.call, tt.headers, tt.defaultKey))
		})
	}
}

func FuzzResolve(f *testing.F) {
	f.Add("", "", "")
	f.Add("a", "b", "c")
	f.Add("", "b", "c")
	f.Fuzz(func(t *testing.T, call, header, def string) {
		got := ordering.Resolve(call, map[string]string{ordering.Header: header}, def)
		switch {
		case call != "":
			require.Equal(t, call, got)
		case header != "":
			require.Equal(t, header, got)
		default:
			require.Equal(t, def, got)
		}
	})
}

func FuzzValidate(f *testing.F) {
	f.Add("customer-1")
	f.Add(strings.Repeat("x", ordering.MaxKeyBytes+1))
	f.Add("\xff")
	f.Fuzz(func(t *testing.T, key string) {
		err := ordering.Validate(key)
		tooLong := len(key) > ordering.MaxKeyBytes
		switch {
		case tooLong:
			require.ErrorIs(t, err, ordering.ErrKeyTooLong)
		case !isUTF8(key):
			require.ErrorIs(t, err, ordering.ErrKeyNotUTF8)
		default:
			require.NoError(t, err)
		}
	})
}

// isUTF8 checks validity by round-tripping through []rune, independently of
// the utf8.ValidString call that Validate uses.
func isUTF8(s string) bool {
	return string([]rune(s)) == s
}
