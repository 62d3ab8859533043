package ordering

import (
	"fmt"
	"unicode/utf8"
)

// Header is the message header that names an ordering key on publish (P1)
// and reports it on delivery (S2). It never travels as a Pub/Sub attribute:
// the key goes in the message's ordering key field instead (P2).
const Header = "partition-key"

// MaxKeyBytes is the longest ordering key the Pub/Sub service accepts, in
// bytes of its UTF-8 encoding (P6).
const MaxKeyBytes = 1024

// Validate reports whether key is an ordering key the service accepts.
//
// The empty key is valid: it means the message is unordered. A key longer
// than [MaxKeyBytes] bytes returns an error matching [ErrKeyTooLong]; a key
// that is not valid UTF-8 returns one matching [ErrKeyNotUTF8].
func Validate(key string) error {
	if len(key) > MaxKeyBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrKeyTooLong, len(key), MaxKeyBytes)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %q", ErrKeyNotUTF8, key)
	}
	return nil
}

// Resolve returns the ordering key of a message (P1): callKey if it is not
// empty, else headers[Header] if that is not empty, else defaultKey.
//
// Resolve does not validate the key it returns; pass it to [Validate]. A nil
// headers map is treated as empty.
func Resolve(callKey string, headers map[string]string, defaultKey string) string {
	if callKey != "" {
		return callKey
	}
	if k := headers[Header]; k != "" {
		return k
	}
	return defaultKey
}
