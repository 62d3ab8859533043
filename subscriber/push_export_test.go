package subscriber

import (
	"context"

	"github.com/keyorder/keyorder/subscriber/internal/push"
	"google.golang.org/api/idtoken"
)

// SetNewValidator sets what makes a push endpoint's token validator when
// WithTokenValidator gave none, for a test that must see a build fail,
// and returns a function that restores it. Only a test that runs alone
// may change it.
func SetNewValidator(f func(context.Context) (*idtoken.Validator, error)) (restore func()) {
	old := push.NewValidator
	push.NewValidator = f
	return func() { push.NewValidator = old }
}
