package load

import (
	"context"
	"strings"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit/fakeherald"
)

// TestWaitForTopic: it returns once the topic is there (at once, or when
// it appears), and with an error naming it when ctx ends first.
func TestWaitForTopic(t *testing.T) {
	f := fakeherald.New(time.Unix(0, 0))
	c := client.New(f.Start(t))
	ctx := context.Background()

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err := WaitForTopic(short, c, "orders")
	if err == nil || !strings.Contains(err.Error(), "topic orders did not appear") {
		t.Errorf("WaitForTopic of a topic that never appears = %v", err)
	}

	appeared := make(chan struct{})
	asked := len(f.Requests())
	go func() {
		// The topic appears after WaitForTopic has asked for it twice.
		for len(f.Requests()) < asked+2 {
			time.Sleep(5 * time.Millisecond)
		}
		f.AddTopic("orders", nil)
		close(appeared)
	}()
	if err := WaitForTopic(ctx, c, "orders"); err != nil {
		t.Errorf("WaitForTopic of a topic that appears = %v", err)
	}
	<-appeared
	if err := WaitForTopic(ctx, c, "orders"); err != nil {
		t.Errorf("WaitForTopic of a topic that is there = %v", err)
	}
}
