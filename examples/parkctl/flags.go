package main

import (
	"flag"
	"io"
	"slices"
	"time"

	"github.com/keyorder/keyorder/subscriber"
)

// flags are every command's flags, parsed wherever they stand.
type flags struct {
	project, sub, parking string
	reach                 time.Duration
	json                  bool          // list
	timeout               time.Duration // release
	wait                  bool          // release
	from                  string        // replay
	since, quiet          time.Duration // replay
	set                   map[string]bool
}

// commandFlags lists the flags each command takes, besides -project and
// -reach.
var commandFlags = map[string][]string{
	"list":     {"sub", "parking", "json"},
	"release":  {"sub", "parking", "timeout", "wait"},
	"withdraw": {"sub", "parking"},
	"replay":   {"from", "since", "quiet"},
}

func (f *flags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.project, "project", "", "the project (default $GOOGLE_CLOUD_PROJECT; on an emulator, keyorder-test)")
	fs.DurationVar(&f.reach, "reach", 5*time.Second, "how long the server has to answer the first call before parkctl says it cannot be reached")
	fs.StringVar(&f.sub, "sub", "", "the subscription whose parked keys to list, release or withdraw")
	fs.StringVar(&f.parking, "parking", "", "the subscription's parking topic, as its WithParking names it; by default the one its keyorder-parking label records")
	fs.BoolVar(&f.json, "json", false, "list: one JSON object a line, for scripts")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "release: how long to wait for the release")
	fs.BoolVar(&f.wait, "wait", true, "release: wait until the key is released; with false, return once the request is recorded")
	fs.StringVar(&f.from, "from", "", "replay: from this time, RFC 3339 (default the oldest message retained)")
	fs.DurationVar(&f.since, "since", 0, "replay: from this long ago")
	fs.DurationVar(&f.quiet, "quiet", subscriber.DefaultQuietPeriod, "replay: end once nothing has arrived for this long")
}

// parse parses args, flags anywhere among the command and its arguments
// ("--" ends the flags), into c.f, and returns the command and its
// arguments; or the exit status of a usage error, reported.
func (c *command) parse(args []string) ([]string, int) {
	fs := flag.NewFlagSet("parkctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parkctl reports the error, with its usage
	c.f.define(fs)
	var tail []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, tail = args[:i], args[i+1:]
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, c.usageError("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	pos = append(pos, tail...)
	if len(pos) == 0 {
		return nil, c.usageError("no command")
	}
	c.f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { c.f.set[fl.Name] = true })
	allowed, known := commandFlags[pos[0]]
	for name := range c.f.set {
		if known && name != "project" && name != "reach" && !slices.Contains(allowed, name) {
			return nil, c.usageError("-%s is not a flag of %s", name, pos[0])
		}
	}
	if c.f.reach <= 0 {
		return nil, c.usageError("-reach %v: need more than 0", c.f.reach)
	}
	return pos, exitOK
}
