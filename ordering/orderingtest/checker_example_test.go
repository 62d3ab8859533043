package orderingtest_test

import (
	"fmt"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

func ExampleChecker() {
	var c orderingtest.Checker
	c.Expect("acct-1", 3)
	c.Expect("acct-2", 2)
	// What a handler processed: acct-2's second message came twice, and
	// acct-1's third never came.
	c.Record("acct-1", 1)
	c.Record("acct-2", 1)
	c.Record("acct-1", 2)
	c.Record("acct-2", 2)
	c.Record("acct-2", 2)

	rep := c.Report()
	fmt.Println(rep)
	fmt.Println(rep.Err() != nil)
	// Output:
	// acct-1: 2 records, 3 expected: 1 missing [3]
	// acct-2: 3 records, 2 expected: 1 duplicates [2]
	// total: 2 keys (2 violating order), 5 records: 0 out of order, 1 missing, 0 unexpected, 1 duplicates
	// true
}

func ExampleAllowRedelivery() {
	// Pub/Sub redelivers a key's tail: 2 and 3 come again after 2 is
	// redelivered. That is in order, with duplicates.
	c := orderingtest.NewChecker(orderingtest.AllowRedelivery())
	for _, seq := range []int{1, 2, 3, 2, 3, 4} {
		c.Record("k", seq)
	}
	fmt.Println(c.Report().Keys[0])
	// Output:
	// k: 6 records: ok, 2 duplicates [2 3]
}
