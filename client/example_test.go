package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"herald/client"
)

func Example() {
	ctx := context.Background()
	c := client.New(client.DefaultAddress, client.WithTimeout(10*time.Second))

	if _, err := c.CreateTopic(ctx, "orders", map[string]string{"shards": "4"}); err != nil && !client.IsAlreadyExists(err) {
		log.Fatal(err)
	}
	ids, err := c.Publish(ctx, "orders", client.Event{Key: "customer-42", Payload: []byte(`{"total":12}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published", ids)

	deliveries, err := c.Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 10, Wait: 5 * time.Second})
	var unread *client.UnreadableError
	switch {
	case errors.As(err, &unread) && !unread.All():
		// Some shards could not be read (see the reasons); the events of
		// the others are in deliveries.
		log.Print(err)
	case err != nil:
		log.Fatal(err)
	}
	for _, d := range deliveries {
		fmt.Printf("%s %s %s\n", d.ID, d.Key, d.Payload)
		// Ack the delivery's receipt: should its lease have lapsed (the
		// event went to another consumer meanwhile), the ack leaves the
		// event to that consumer instead of ending its lease.
		_, err := c.Ack(ctx, d.Receipt)
		var lapsed *client.LapsedError
		if err != nil && !errors.As(err, &lapsed) {
			log.Fatal(err)
		}
	}
}

func ExampleClient_Reserve() {
	ctx := context.Background()
	c := client.New(client.DefaultAddress)

	// Hold space first, then commit once the local transaction is done.
	r, err := c.Reserve(ctx, "orders", "customer-42", 4096, 1)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Commit(ctx, r.ID, client.Event{Key: "customer-42", Payload: []byte("paid")}); err != nil {
		_ = c.Abort(ctx, r.ID)
		log.Fatal(err)
	}
}

// A client of a three-node cluster that publishes to, fetches from and
// acknowledges on each shard's leader, asking node 1 (or, if it is down,
// node 2 or 3) where they are.
func ExampleWithLeaderRouting() {
	c := client.New("http://127.0.0.1:7601",
		client.WithLeaderRouting("127.0.0.1:7602", "127.0.0.1:7603"),
		client.WithPublishRetries(20))
	ctx := context.Background()
	if _, err := c.Publish(ctx, "orders", client.Event{Key: "customer-42", Payload: []byte("{}")}); err != nil {
		log.Fatal(err)
	}
	ds, err := c.Fetch(ctx, "orders", client.FetchOptions{MaxEvents: 10, Wait: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		if _, err := c.Ack(ctx, d.Receipt); err != nil {
			log.Fatal(err)
		}
	}
}
