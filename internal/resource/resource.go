// Package resource checks topic and subscription names against the
// service's rules before any request is made, so that a bad name is a
// configuration error at construction rather than the server's
// InvalidArgument on the first call, or a resource left half made.
//
// A name is an ID ("orders") or a full name
// ("projects/my-project/topics/orders"). An ID, the last segment of a full
// name, must:
//
//   - be 3 to 255 characters long;
//   - start with a letter;
//   - hold only ASCII letters, digits and the characters - _ . ~ + %;
//   - not start with "goog", which the service keeps for itself.
//
// A full name has exactly the four segments "projects", a non-empty
// project ID, the collection ("topics" or "subscriptions") and the ID. The
// project ID is left to the service, which knows which projects exist.
//
// The errors are plain descriptions; each package wraps them in its own
// ErrInvalidConfig.
package resource

import (
	"fmt"
	"strings"
)

// The length of an ID, in characters (all ASCII).
const (
	MinIDLen = 3
	MaxIDLen = 255
)

// reservedPrefix starts IDs that the service keeps for itself.
const reservedPrefix = "goog"

// Topic checks name, a topic ID or a full "projects/P/topics/T" name.
func Topic(name string) error { return check("topic", "topics", name) }

// Subscription checks name, a subscription ID or a full
// "projects/P/subscriptions/S" name.
func Subscription(name string) error { return check("subscription", "subscriptions", name) }

// check checks name, of kind ("topic") in collection ("topics").
func check(kind, collection, name string) error {
	id := name
	if strings.HasPrefix(name, "projects/") {
		parts := strings.Split(name, "/")
		if len(parts) != 4 || parts[1] == "" || parts[2] != collection {
			return fmt.Errorf("%s name %q is not of the form projects/PROJECT/%s/ID", kind, name, collection)
		}
		id = parts[3]
	}
	if problem := checkID(id); problem != "" {
		return fmt.Errorf("%s %q: the ID %s", kind, name, problem)
	}
	return nil
}

// checkID returns what is wrong with id, or "" if nothing is.
func checkID(id string) string {
	if id == "" {
		return "is empty"
	}
	for i, c := range id {
		if !isIDChar(c) {
			return fmt.Sprintf("has %q at byte %d: only letters, digits and - _ . ~ + %% are allowed", c, i)
		}
	}
	switch {
	case !isLetter(rune(id[0])):
		return fmt.Sprintf("starts with %q, not a letter", id[0])
	case len(id) < MinIDLen || len(id) > MaxIDLen:
		return fmt.Sprintf("is %d characters long, not %d to %d", len(id), MinIDLen, MaxIDLen)
	case strings.HasPrefix(id, reservedPrefix):
		return fmt.Sprintf("starts with %q, which the service reserves", reservedPrefix)
	}
	return ""
}

func isLetter(c rune) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isIDChar(c rune) bool {
	return isLetter(c) || '0' <= c && c <= '9' || strings.ContainsRune("-_.~+%", c)
}
