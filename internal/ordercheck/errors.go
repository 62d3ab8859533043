package ordercheck

import "errors"

// ErrViolation is wrapped by the error Report.Err returns when a key's
// records are out of order, duplicated where that is not allowed, missing
// or unexpected.
var ErrViolation = errors.New("ordercheck: order violated")
