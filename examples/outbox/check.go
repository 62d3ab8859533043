package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// report is what the databases hold at the end.
type report struct {
	versions map[string]int64    // the writers' last version per account
	balances map[string][2]int64 // per account: the writers' balance, the receivers'
	journal  map[string][]int64  // per account: the versions applied, in the order applied
	applied  int
	latency  []time.Duration // commit to applied, per application
}

// applied counts the events the receivers applied.
func (s *store) applied(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM journal").Scan(&n)
	return n, err
}

// read reads both databases.
func read(ctx context.Context, cfg config) (report, error) {
	rep := report{versions: map[string]int64{}, balances: map[string][2]int64{}, journal: map[string][]int64{}}
	source, err := openStore(cfg.source)
	if err != nil {
		return rep, err
	}
	defer source.Close()
	rows, err := source.db.QueryContext(ctx, "SELECT key, version, balance FROM accounts")
	if err != nil {
		return rep, err
	}
	for rows.Next() {
		var key string
		var version, balance int64
		if err := rows.Scan(&key, &version, &balance); err != nil {
			return rep, err
		}
		rep.versions[key] = version
		rep.balances[key] = [2]int64{balance, 0}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return rep, err
	}
	return rep, readSink(ctx, cfg, &rep)
}

func readSink(ctx context.Context, cfg config, rep *report) error {
	sink, err := openStore(cfg.sink)
	if err != nil {
		return err
	}
	defer sink.Close()
	rows, err := sink.db.QueryContext(ctx, "SELECT key, version, committed, applied FROM journal ORDER BY id")
	if err != nil {
		return err
	}
	for rows.Next() {
		var key string
		var version, committed, applied int64
		if err := rows.Scan(&key, &version, &committed, &applied); err != nil {
			return err
		}
		rep.journal[key] = append(rep.journal[key], version)
		rep.latency = append(rep.latency, time.Duration(applied-committed))
		rep.applied++
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	rows, err = sink.db.QueryContext(ctx, "SELECT key, balance FROM balances")
	if err != nil {
		return err
	}
	for rows.Next() {
		var key string
		var balance int64
		if err := rows.Scan(&key, &balance); err != nil {
			return err
		}
		b := rep.balances[key]
		b[1] = balance
		rep.balances[key] = b
	}
	return errors.Join(rows.Err(), rows.Close())
}

// check compares the receivers' journal with the writers' accounts: each
// account's versions 1..last applied once each, in that order, and the
// balances equal. It prints the result and returns an error for anything
// else.
func check(rep report, cfg config, out io.Writer) error {
	var errs []error
	var total int64
	for key, last := range rep.versions {
		total += last
		if err := inOrderOnce(rep.journal[key], last); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		if b := rep.balances[key]; b[0] != b[1] {
			errs = append(errs, fmt.Errorf("%s: the writers' balance is %d, the receivers' %d", key, b[0], b[1]))
		}
	}
	for key := range rep.journal {
		if _, ok := rep.versions[key]; !ok {
			errs = append(errs, fmt.Errorf("%s: applied, but no writer changed it", key))
		}
	}
	if total != int64(cfg.total()) || rep.applied != cfg.total() {
		errs = append(errs, fmt.Errorf("%d changes committed and %d applied, want %d", total, rep.applied, cfg.total()))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p50, p99 := percentiles(rep.latency)
	fmt.Fprintf(out, "every event applied exactly once, in commit order, on %d accounts; commit to applied p50 %v, p99 %v\n",
		len(rep.versions), p50.Round(time.Millisecond), p99.Round(time.Millisecond))
	return nil
}

// inOrderOnce checks that applied is 1, 2, ... last.
func inOrderOnce(applied []int64, last int64) error {
	for i, v := range applied {
		if want := int64(i + 1); v != want {
			return fmt.Errorf("application %d is version %d, want %d (applied: %v)", i+1, v, want, applied)
		}
	}
	if int64(len(applied)) != last {
		return fmt.Errorf("%d of %d versions applied", len(applied), last)
	}
	return nil
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}
