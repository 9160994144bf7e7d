package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herald/client"
)

func newClusterCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the cluster's nodes and shards, add, remove and rebalance nodes",
		Long: `Show the cluster's nodes and shards, add nodes, remove (drain) them, and
rebalance replicas onto added nodes.

Every shard has a preferred leader, the first of its replicas; once it is up
and has caught up, the leader hands it the leadership, so leaders stay spread
over the nodes after a node restarts. These commands need an admin token.`,
		Example: `  herald cluster status
  herald cluster add 4 10.0.0.4:7600
  herald cluster remove 3 --wait
  herald cluster rebalance --wait`,
	}
	cmd.AddCommand(newClusterStatusCommand(g), newClusterAddCommand(g), newClusterRemoveCommand(g), newClusterRebalanceCommand(g))
	return cmd
}

func newClusterStatusCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List the nodes and, per shard, its replicas and leader",
		Long: `List the cluster's nodes as the node asked sees them (reachable or not,
draining, how many replicas they hold), then every shard: its Raft group,
its replicas (preferred leader first) with the last log index each applied,
its preferred leader and its leader. A node alone lists itself and its
shards.`,
		Example: `  herald cluster status
  herald cluster status -o json`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := g.client().ClusterStatus(cmd.Context())
			if err != nil {
				return g.explain(err)
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return printClusterStatus(cmd.OutOrStdout(), st)
		},
	}
}

func printClusterStatus(w io.Writer, st *client.ClusterStatus) error {
	tw := newTable(w)
	row(tw, "NODE", "ADDRESS", "STATE", "REPLICAS")
	for _, n := range st.Nodes {
		state := "up"
		if !n.Reachable {
			state = "unreachable: " + n.Error
		}
		if n.Draining {
			state += ", draining"
		}
		if n.Self {
			state += " (answered)"
		}
		row(tw, n.ID, orDash(n.Address), state, n.Replicas)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ncontroller leader: %s\n", nodeText(st.ControllerLeader))
	if st.Rebalancing {
		fmt.Fprintln(w, "rebalancing: replicas are moving (herald cluster rebalance)")
	}
	fmt.Fprintln(w)
	if len(st.Shards) == 0 {
		_, err := fmt.Fprintln(w, "no topics")
		return err
	}
	tw = newTable(w)
	row(tw, "SHARD", "GROUP", "REPLICAS (NODE:APPLIED)", "PREFERRED", "LEADER")
	for _, s := range st.Shards {
		replicas := make([]string, len(s.Replicas))
		for i, r := range s.Replicas {
			replicas[i] = fmt.Sprintf("%d:%d", r.Node, r.Applied)
			if r.Error != "" {
				replicas[i] = fmt.Sprintf("%d:?", r.Node)
			}
		}
		row(tw, s.Name, s.Group, strings.Join(replicas, " "), nodeText(s.PreferredLeader), nodeText(s.Leader))
	}
	return tw.Flush()
}

// nodeText shows a node id, or "-" for none.
func nodeText(id uint64) string {
	if id == 0 {
		return "-"
	}
	return strconv.FormatUint(id, 10)
}

func parseNodeID(text string) (uint64, error) {
	id, err := strconv.ParseUint(text, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("node id %q: want a whole number from 1 up, as in --node-id", text)
	}
	return id, nil
}

func newClusterAddCommand(g *globals) *cobra.Command {
	var rebalance bool
	cmd := &cobra.Command{
		Use:   "add ID ADDRESS",
		Short: "Make a node a member, so that new topics are placed on it",
		Long: `Make node ID, listening at ADDRESS (host:port), a member of the cluster.
Topics created from then on are placed on it too; the shards of existing
topics stay where they are, unless --rebalance is given: then replicas move
onto it as "herald cluster rebalance" moves them, once it has started and
joined.`,
		Example: `  herald cluster add 4 10.0.0.4:7600
  herald cluster add 4 10.0.0.4:7600 --rebalance`,
		Args: nArgs(2, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			c := g.client()
			if err := c.AddNode(cmd.Context(), id, args[1]); err != nil {
				return g.explain(err)
			}
			out := cmd.OutOrStdout()
			if !g.json() {
				fmt.Fprintf(out, "node %d is a member at %s\n", id, args[1])
			}
			if rebalance {
				if err := c.Rebalance(cmd.Context()); err != nil {
					return g.explain(err)
				}
			}
			switch {
			case g.json():
				return writeJSON(out, map[string]any{"id": nodeIDJSON(id), "address": args[1], "rebalancing": rebalance})
			case rebalance:
				_, err = fmt.Fprintln(out, "rebalancing: replicas move onto it once it has joined; herald cluster status shows the progress")
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&rebalance, "rebalance", false, "also start a rebalance (herald cluster rebalance), which moves replicas of existing topics onto the node once it has joined")
	return cmd
}

func newClusterRebalanceCommand(g *globals) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "Move replicas so that every node holds an even share",
		Long: `Move shard replicas so that every node holds an even share (within one of
each other), then spread the shards' preferred leaders evenly: after
"herald cluster add", the replicas of existing topics stay where they were.

Replicas move one at a time, the way a drain moves them: the new replica
joins the shard's group as a learner, votes once it has caught up, and only
then is the old one removed, so a shard never has fewer up-to-date replicas
than a quorum. A shard whose replica moves off its leader hands the
leadership over first, once no consumer holds a lease on it. The node
leading the controller drives the rebalance, deciding each step from the
cluster's state: if it stops, the next leader carries on. A rebalance waits
while a node drains. Running it on a balanced cluster moves nothing.

Without --wait it returns once the rebalance is recorded; "herald cluster
status" shows "rebalancing" until it is done.`,
		Example: `  herald cluster rebalance
  herald cluster rebalance --wait`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			var before *client.ClusterStatus // what --wait counts moves from
			if wait {
				var err error
				if before, err = c.ClusterStatus(cmd.Context()); err != nil {
					return g.explain(err)
				}
			}
			if err := c.Rebalance(cmd.Context()); err != nil {
				return g.explain(err)
			}
			out := cmd.OutOrStdout()
			switch {
			case wait:
				return g.waitRebalanced(cmd, c, before)
			case g.json():
				return writeJSON(out, map[string]any{"rebalancing": true})
			}
			_, err := fmt.Fprintln(out, "rebalancing; herald cluster status shows its progress")
			return err
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the rebalance is done, printing each node's replicas as they change")
	return cmd
}

// waitRebalanced polls the cluster's status until no rebalance is under
// way, printing each node's replicas when they change, then what moved
// (with --output json, the progress on stderr and what moved as JSON).
func (g *globals) waitRebalanced(cmd *cobra.Command, c *client.Client, before *client.ClusterStatus) error {
	ctx, w := cmd.Context(), progressOut(g, cmd)
	shown := ""
	for {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		if line := "replicas per node: " + replicasPerNode(st); line != shown {
			shown = line
			fmt.Fprintln(w, line)
		}
		if !st.Rebalancing && g.json() {
			return writeJSON(cmd.OutOrStdout(), map[string]any{"rebalanced": true, "replicasMoved": movedReplicas(before, st)})
		}
		if !st.Rebalancing {
			_, err := fmt.Fprintf(w, "rebalanced: %s moved; preferred leaders per node: %s\n", count(movedReplicas(before, st), "replica"), leadersPerNode(st))
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting: the rebalance goes on (replicas per node: %s): %w", replicasPerNode(st), ctx.Err())
		case <-time.After(drainPoll):
		}
	}
}

// replicasPerNode shows how many replicas each node holds, as "1:3 2:3".
func replicasPerNode(st *client.ClusterStatus) string {
	parts := make([]string, len(st.Nodes))
	for i, n := range st.Nodes {
		parts[i] = fmt.Sprintf("%d:%d", n.ID, n.Replicas)
	}
	return strings.Join(parts, " ")
}

// leadersPerNode shows of how many shards each node is the preferred
// leader.
func leadersPerNode(st *client.ClusterStatus) string {
	led := make(map[uint64]int)
	for _, s := range st.Shards {
		led[s.PreferredLeader]++
	}
	parts := make([]string, len(st.Nodes))
	for i, n := range st.Nodes {
		parts[i] = fmt.Sprintf("%d:%d", n.ID, led[n.ID])
	}
	return strings.Join(parts, " ")
}

// movedReplicas counts the replicas nodes gained from before to after:
// a move adds one to the node it goes to.
func movedReplicas(before, after *client.ClusterStatus) int {
	had := make(map[uint64]int)
	for _, n := range before.Nodes {
		had[n.ID] = n.Replicas
	}
	moved := 0
	for _, n := range after.Nodes {
		moved += max(0, n.Replicas-had[n.ID])
	}
	return moved
}

func newClusterRemoveCommand(g *globals) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:   "remove ID",
		Short: "Drain a node: move its replicas to the other nodes, then let it go",
		Long: `Drain node ID: no new shard is placed on it, and the leader of each shard it
holds moves that replica to another node, one shard at a time: the new replica
joins as a learner, votes once it has caught up, and only then is the drained
node's replica removed, so a shard never has fewer up-to-date replicas than a
quorum. The drained node hands over the leadership of its shards first. Once
it holds nothing, it leaves the controller and the cluster; stop it then.

It is refused when the other nodes could not hold its replicas (a shard with
three replicas needs three other nodes). Without --wait it returns once the
drain is recorded; "herald cluster status" shows its progress.`,
		Example: `  herald cluster remove 3
  herald cluster remove 3 --wait`,
		Args: nArgs(1, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			c := g.client()
			if wait {
				// The drained node leaves the controller's group, so it
				// stops hearing of the cluster: another node must say
				// when the drain is done.
				st, err := c.ClusterStatus(cmd.Context())
				if err != nil {
					return g.explain(err)
				}
				if st.NodeID == id {
					return fmt.Errorf("--server is node %d itself, which stops hearing of the cluster once drained; to --wait, ask another node", id)
				}
			}
			if err := c.RemoveNode(cmd.Context(), id); err != nil {
				return g.explain(err)
			}
			out := cmd.OutOrStdout()
			switch {
			case wait:
				return g.waitDrained(cmd, c, id)
			case g.json():
				return writeJSON(out, map[string]any{"id": nodeIDJSON(id), "draining": true})
			}
			_, err = fmt.Fprintf(out, "node %d is draining; herald cluster status shows its progress\n", id)
			return err
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the node holds no replica and has left the cluster, printing the replicas left")
	return cmd
}

// drainPoll is how often remove --wait and rebalance --wait ask for the
// cluster's status.
const drainPoll = 500 * time.Millisecond

// waitDrained polls the cluster's status until node id has left it
// (with --output json, the progress on stderr and the end as JSON).
func (g *globals) waitDrained(cmd *cobra.Command, c *client.Client, id uint64) error {
	ctx, w := cmd.Context(), progressOut(g, cmd)
	left := -1
	for {
		st, err := c.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		member := false
		for _, n := range st.Nodes {
			if n.ID == id {
				member = true
				if n.Replicas != left {
					left = n.Replicas
					fmt.Fprintf(w, "node %d: %s left\n", id, count(left, "replica"))
				}
			}
		}
		if !member && g.json() {
			return writeJSON(cmd.OutOrStdout(), map[string]any{"id": nodeIDJSON(id), "left": true})
		}
		if !member {
			_, err := fmt.Fprintf(w, "node %d holds no replica and has left the cluster; stop it\n", id)
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped waiting: node %d is still draining (%d replicas left): %w", id, left, ctx.Err())
		case <-time.After(drainPoll):
		}
	}
}

// progressOut is where a --wait prints its progress: on stdout, unless
// stdout is for the JSON document.
func progressOut(g *globals, cmd *cobra.Command) io.Writer {
	if g.json() {
		return cmd.ErrOrStderr()
	}
	return cmd.OutOrStdout()
}

// nodeIDJSON writes a node id as the API's JSON does (a 64-bit integer,
// as a string).
func nodeIDJSON(id uint64) string { return strconv.FormatUint(id, 10) }

// peerAddresses returns the host:port of each of --peers' base URLs.
func peerAddresses(peers map[uint64]string) map[uint64]string {
	out := make(map[uint64]string, len(peers))
	for id, url := range peers {
		_, addr, _ := strings.Cut(url, "://")
		out[id] = addr
	}
	return out
}
