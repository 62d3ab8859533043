package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/keyorder/keyorder/subscriber"
)

// A book keeps each customer's order state. Its apply is the Handler: it
// runs on the push endpoint's request goroutines, one at a time per
// customer, since the service pushes a key's next message only once the
// previous one is acknowledged.
type book struct {
	mu         sync.Mutex          // guards the fields below
	calls      int                 // handler calls
	state      map[string]string   // customer → the last event applied
	log        map[string][]string // customer → the handler's calls, in order
	violations []string            // events applied out of order or twice
}

func newBook() *book {
	return &book{state: map[string]string{}, log: map[string][]string{}}
}

var errUnavailable = errors.New("payment service unavailable")

// apply applies one event, if it is its customer's next one.
func (b *book) apply(_ context.Context, d *subscriber.Delivery) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	event := string(d.Data)
	if d.Key == flakyCustomer && event == flakyEvent && d.Attempt == 1 {
		b.log[d.Key] = append(b.log[d.Key], event+" failed ("+errUnavailable.Error()+")")
		return errUnavailable // answered 500: pushed again, before the key's next
	}
	// The customer's next event follows its last one (-1 for none).
	if i := slices.Index(lifecycle, b.state[d.Key]) + 1; i == len(lifecycle) || lifecycle[i] != event {
		b.violations = append(b.violations, fmt.Sprintf("%s: %s after %q", d.Key, event, b.state[d.Key]))
		b.log[d.Key] = append(b.log[d.Key], event+" (refused: out of order)")
		return nil // not applied, and not worth a retry
	}
	b.state[d.Key] = event
	if d.Attempt > 1 {
		event += fmt.Sprintf(" (attempt %d)", d.Attempt)
	}
	b.log[d.Key] = append(b.log[d.Key], event)
	return nil
}

func (b *book) callCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// print lists each customer's handler calls, in the order they ran.
func (b *book) print(out io.Writer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintln(out, "applied, per customer:")
	for _, c := range customers() {
		fmt.Fprintf(out, "  %s: %s\n", c, strings.Join(b.log[c], ", "))
	}
}

// check reports the events applied out of order or twice, and the
// customers whose events were not all applied.
func (b *book) check() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	problems := slices.Clone(b.violations)
	for _, c := range customers() {
		if want := lifecycle[orders[c]-1]; b.state[c] != want {
			problems = append(problems, fmt.Sprintf("%s: at %q, not %q", c, b.state[c], want))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("orders applied wrongly: %s", strings.Join(problems, "; "))
	}
	return nil
}

// customers returns the customers, sorted.
func customers() []string { return slices.Sorted(maps.Keys(orders)) }
