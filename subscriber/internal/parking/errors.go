package parking

import "errors"

// The errors of parking, which the facade (subscriber) re-exports under the
// same names.
var (
	ErrNotReceiving = errors.New("keyorder/subscriber: no Receive is running")
	ErrNotParked    = errors.New("keyorder/subscriber: key is not parked")
	ErrReleasing    = errors.New("keyorder/subscriber: key is being released")
	ErrParkedAgain  = errors.New("keyorder/subscriber: a released message failed again; the key stays parked")
	ErrNoRequest    = errors.New("keyorder/subscriber: no release request is pending for the key")
	ErrReleased     = errors.New("keyorder/subscriber: the key was released already")
	ErrWithdrawn    = errors.New("keyorder/subscriber: the release request was withdrawn; the key stays parked")
)
