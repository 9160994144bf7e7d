package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"herald/internal/datadir"
	"herald/internal/host"
	"herald/internal/node"
	"herald/internal/shard"
)

// errDamageKept is returned when damage was found and left in place: the
// report is the output, and the exit status says that the node will not
// start as it is.
var errDamageKept = errors.New("damage found; nothing was changed: run again with --discard-damaged to cut it and start the node with everything before it")

func newRepairCommand() *cobra.Command {
	var dataDir string
	var discard bool
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Find damage in a stopped node's data directory, and cut it so the node can start",
		Long: `Check the data directory of a stopped node: find its damaged logs (its
write-ahead log, each shard's and the controller's own log), and open every
shard as the node would once they are cut, without changing anything. For
each damaged log it says where the damage is and what cutting it would
lose: the shards, the index ranges of their entries after the damage, and
how many events those hold at most. Shards that would not open even then
are named with the reason: herald repair cannot mend them.

With --discard-damaged, each damaged log is cut at the damage: the damaged
record and everything after it are moved to a new directory under
DATA_DIR/damaged/, nothing deleted, and the node then starts with
everything before the damage. At that start, each shard that lost
acknowledged entries says so in the log, once.

Use it on a single node. In a cluster, a node rebuilds the damaged shards
of its data directory from its peers by itself when it starts, and a node
on an empty data directory is rebuilt from them entirely, with nothing
lost: use herald repair only when every replica is damaged.

The exit status is 0 when nothing is damaged or the damage was cut, and 1
when damage was found and left in place, or cannot be mended.`,
		Example: `  herald repair --data-dir /var/lib/herald
  herald repair --data-dir /var/lib/herald --discard-damaged`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return repair(cmd.OutOrStdout(), dataDir, discard)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultServeConfig().DataDir, "the node's data directory (the node must be stopped)")
	cmd.Flags().BoolVar(&discard, "discard-damaged", false, "cut each damaged log at its damage, moving the rest aside, and accept the loss of what it held")
	return cmd
}

func repair(w io.Writer, dataDir string, discard bool) error {
	lock, err := datadir.Acquire(dataDir, "herald repair")
	if err != nil {
		return err
	}
	defer lock.Release()
	c, err := host.CheckDir(dataDir, map[string]uint64{node.ControllerDir: node.ControllerGroup})
	if err != nil {
		return err
	}
	damaged := describeCheck(w, c)
	if c.WALErr != nil {
		return fmt.Errorf("the write-ahead log cannot be opened even once cut, so the node cannot start: %w", c.WALErr)
	}
	if damaged == 0 {
		if broken := unmendable(c); broken > 0 {
			return fmt.Errorf("%s cannot be mended by herald repair (see above)", count(broken, "shard"))
		}
		fmt.Fprintf(w, "No damage in %s.\n", dataDir)
		return nil
	}
	if !discard {
		return errDamageKept
	}
	aside := filepath.Join(dataDir, "damaged", time.Now().UTC().Format("20060102T150405Z"))
	if err := c.Repair(aside); err != nil {
		return err
	}
	fmt.Fprintf(w, "Cut the damage; what followed it is in %s.\nStart the node: each shard that lost entries says so in its log, once.\n", aside)
	return nil
}

// describeCheck writes what the check found, and returns how many logs
// are damaged or groups must accept a loss: what Repair would change.
func describeCheck(w io.Writer, c *host.Check) int {
	changes := 0
	if c.WAL != nil {
		describeDamage(w, "the node's write-ahead log", c.WAL)
		changes++
	}
	for _, g := range c.Groups {
		label := groupLabel(g.ID, g.Name)
		if g.Log != nil {
			describeDamage(w, "the log of "+label, g.Log)
			changes++
		}
		if len(g.Lost) > 0 {
			fmt.Fprintf(w, "After the repair, %s:\n", label)
			for _, l := range g.Lost {
				fmt.Fprintf(w, "  accepts that %s\n", l)
			}
			if g.Log == nil && c.WAL == nil {
				changes++
			}
		}
		if g.Err != nil {
			fmt.Fprintf(w, "Cannot be mended: %s\n  %v\n  On a single node, delete its topic to discard it (its events are lost); in a cluster, the node rebuilds it from its peers when it starts.\n", label, g.Err)
		}
	}
	return changes
}

// unmendable counts the groups that would not open even after a repair.
func unmendable(c *host.Check) int {
	n := 0
	for _, g := range c.Groups {
		if g.Err != nil {
			n++
		}
	}
	return n
}

// describeDamage writes where a log is damaged and what a cut loses.
func describeDamage(w io.Writer, what string, d *host.Damage) {
	fmt.Fprintf(w, "Damaged: %s\n  %s at byte offset %d: %s\n", what, d.File, d.Offset, d.Reason)
	fmt.Fprintf(w, "  Cutting it moves aside %d bytes (%s) and keeps everything before the damage.\n",
		d.Bytes, count(len(d.Later), "later file"))
	if d.Unreadable > 0 {
		fmt.Fprintf(w, "  %d of those bytes cannot be read: what they held cannot be named.\n", d.Unreadable)
	}
	events := 0
	for _, l := range d.Lost {
		if l.First == 0 {
			fmt.Fprintf(w, "  %s: its raft state (term, vote, commit) recorded after the damage\n", groupLabel(l.Group, l.Name))
			continue
		}
		n := commandEvents(l.Commands)
		events += n
		entries := int(l.Last - l.First + 1)
		fmt.Fprintf(w, "  %s: entries %d..%d (%s, %s)\n", groupLabel(l.Group, l.Name), l.First, l.Last,
			count(entries, "entry"), count(n, "event"))
	}
	fmt.Fprintf(w, "  At most %s can be lost with it, besides what unreadable bytes held; entries the shards' own logs hold too are kept.\n",
		count(events, "acknowledged event"))
}

// commandEvents counts the events that shard commands append.
func commandEvents(cmds [][]byte) int {
	n := 0
	for _, data := range cmds {
		c, err := shard.UnmarshalCommand(data)
		if err != nil {
			continue // the controller's, or unreadable
		}
		switch c.Op {
		case shard.OpPublish, shard.OpCommit, shard.OpReplayDead:
			n += len(c.Events)
		}
	}
	return n
}

// groupLabel names a group for an operator: the shard's name, or the
// controller.
func groupLabel(id uint64, name string) string {
	switch {
	case id == node.ControllerGroup:
		return "the controller (group 1)"
	case name != "":
		return fmt.Sprintf("shard %s (group %d)", name, id)
	}
	return fmt.Sprintf("group %d", id)
}
