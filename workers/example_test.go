package workers_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/keyorder/keyorder/workers"
)

// The tasks of one key run in submit order; keys run in parallel.
func Example() {
	pool, err := workers.New(4)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	var mu sync.Mutex
	shipped := map[string][]int{}
	for order := 1; order <= 3; order++ {
		for _, customer := range []string{"alice", "bob"} {
			err := pool.Submit(ctx, customer, func() {
				mu.Lock()
				defer mu.Unlock()
				shipped[customer] = append(shipped[customer], order)
			})
			if err != nil {
				log.Fatal(err)
			}
		}
	}
	if err := pool.Close(ctx); err != nil { // runs what is queued
		log.Fatal(err)
	}
	fmt.Println("alice:", shipped["alice"])
	fmt.Println("bob:", shipped["bob"])
	// Output:
	// alice: [1 2 3]
	// bob: [1 2 3]
}

// message is what a subscriber might submit: it acks when it runs and nacks
// when the pool drops it.
type message struct{ id string }

func (m *message) Run()  { fmt.Println("ack", m.id) }
func (m *message) Drop() { fmt.Println("nack", m.id) }

// When a key's task fails for good, it drops the key's queued tail: the
// pool calls Drop on each of those tasks instead of Run (S5).
func ExamplePool_DropQueued() {
	pool, err := workers.New(2)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	tailQueued := make(chan struct{})
	err = pool.Submit(ctx, "account-1", func() {
		<-tailQueued
		dropped := pool.DropQueued("account-1")
		fmt.Println("m1 failed, dropped", dropped)
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"m2", "m3"} {
		if err := pool.SubmitTask(ctx, "account-1", &message{id}); err != nil {
			log.Fatal(err)
		}
	}
	close(tailQueued)
	if err := pool.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// nack m2
	// nack m3
	// m1 failed, dropped 2
}

// A task that panics is reported, and its partition goes on.
func ExampleWithPanicHandler() {
	pool, err := workers.New(1, workers.WithPanicHandler(func(key string, recovered any, _ []byte) {
		fmt.Printf("task of %s panicked: %v\n", key, recovered)
	}))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, task := range []func(){
		func() { panic("boom") },
		func() { fmt.Println("next task runs") },
	} {
		if err := pool.Submit(ctx, "k", task); err != nil {
			log.Fatal(err)
		}
	}
	if err := pool.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// task of k panicked: boom
	// next task runs
}
