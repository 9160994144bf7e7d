package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
)

// heldEvents is what deleting a topic would lose.
type heldEvents struct {
	events, deadLetters uint64
	unknown             int // shards that could not say
}

func (h heldEvents) any() bool { return h.events > 0 || h.deadLetters > 0 || h.unknown > 0 }

func (h heldEvents) String() string {
	var parts []string
	if h.events > 0 {
		parts = append(parts, count(int(h.events), "pending event"))
	}
	if h.deadLetters > 0 {
		parts = append(parts, count(int(h.deadLetters), "dead letter"))
	}
	if h.unknown > 0 {
		parts = append(parts, count(h.unknown, "shard")+" whose events could not be counted")
	}
	return strings.Join(parts, " and ")
}

// heldEvents counts the events and dead letters topic holds.
func (g *globals) heldEvents(cmd *cobra.Command, topic string) (heldEvents, error) {
	s, err := g.client().TopicStats(cmd.Context(), topic)
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		// Without a token that may read the topic, the delete is refused
		// too: let the server say what that needs.
		return heldEvents{}, nil
	}
	if err != nil {
		return heldEvents{}, g.explain(err)
	}
	h := heldEvents{events: s.Total.Events, deadLetters: s.Total.DeadLetters}
	for _, st := range s.Shards {
		if st.Error != "" {
			h.unknown++
		}
	}
	return h, nil
}

// confirmDelete asks on a terminal whether to delete topic and what it
// holds, and refuses elsewhere: a script must say --force.
func confirmDelete(cmd *cobra.Command, topic string, held heldEvents) error {
	f, ok := cmd.InOrStdin().(*os.File)
	if !ok || !isTerminal(f) {
		return fmt.Errorf("topic %q holds %s, which deleting it loses; pass --force to delete it anyway", topic, held)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "topic %q holds %s. Delete it and them? [y/N] ", topic, held)
	answer, _ := bufio.NewReader(f).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("topic %q not deleted; --force deletes it without asking", topic)
	}
	return nil
}
