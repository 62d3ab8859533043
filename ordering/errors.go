package ordering

import "errors"

// ErrKeyTooLong is returned by [Validate] for a key longer than
// [MaxKeyBytes] bytes. The service rejects such keys.
var ErrKeyTooLong = errors.New("ordering key too long")

// ErrKeyNotUTF8 is returned by [Validate] for a key that is not valid
// UTF-8. Ordering keys are protobuf strings, which must be valid UTF-8.
var ErrKeyNotUTF8 = errors.New("ordering key is not valid UTF-8")

// ErrBadStamp is returned by [ParseStamp] and [Stamp.Validate] for a stamp
// that is incomplete or malformed: a producer ID or a sequence number out
// of its documented form, or a message that carries a stamp in both its
// forms.
var ErrBadStamp = errors.New("bad stamp")

// ErrBadStampKey is returned by [NewStampKeys] for no key, or a key
// shorter than [MinStampKeyBytes].
var ErrBadStampKey = errors.New("bad stamp key")

// ErrUnverifiedStamp is returned by [StampKeys.Verify] for a stamp whose
// signature is missing, malformed, or made by none of the keys: a stamp
// that proves nothing, which a subscriber with keys takes for none.
var ErrUnverifiedStamp = errors.New("unverified stamp")
