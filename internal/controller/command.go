package controller

import (
	"encoding/json"
	"fmt"
	"slices"

	"herald/internal/topic"
)

// The operations a Command can perform.
const (
	OpCreate = "create" // create topic Name with Attributes
	OpSet    = "set"    // apply Changes to the attributes of topic Name
	OpDelete = "delete" // delete topic Name
)

// A Command is one change to the controller's state, as proposed to its
// Raft group. Commands are rare (an operator creating a topic), so they
// are encoded as JSON, which is easy to inspect in a log dump.
type Command struct {
	Op   string `json:"op"`
	Name string `json:"name"`
	// Attributes are the complete attributes of a created topic, usually
	// topic.Defaults().With(what the user asked for). Only for OpCreate.
	Attributes *topic.Attributes `json:"attributes,omitempty"`
	// Changes are attribute changes in the string form of
	// topic.Attributes.With. Only for OpSet.
	Changes map[string]string `json:"changes,omitempty"`
	// Members are the ids of the cluster's nodes, over which a created
	// topic's shards are placed (see Place). Only for OpCreate; none
	// places the shards on node 1, as before herald had clusters.
	Members []uint64 `json:"members,omitempty"`
	// Time is when the command was proposed, in Unix nanoseconds. The
	// proposer chooses it, so that every replica records the same time.
	Time int64 `json:"time"`
}

// Marshal encodes c for proposing.
func (c Command) Marshal() []byte {
	data, err := json.Marshal(c)
	if err != nil {
		// Command holds only strings, numbers, booleans and string maps,
		// which always encode.
		panic("controller: encoding a command: " + err.Error())
	}
	return data
}

// UnmarshalCommand decodes a command encoded by Marshal and checks that it
// has the fields its Op needs. Errors wrap topic.ErrInvalid. It does not
// check the name or the attributes: Apply does, on the state they apply to.
func UnmarshalCommand(data []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(data, &c); err != nil {
		return Command{}, invalidf("invalid controller command: %v; propose commands encoded by Command.Marshal", err)
	}
	if err := c.checkFields(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// checkFields checks that c carries what its Op needs, and nothing that
// the Op would silently ignore.
func (c *Command) checkFields() error {
	switch c.Op {
	case OpCreate:
		if c.Attributes == nil {
			return invalidf("invalid controller command: create of topic %q has no attributes; start from topic.Defaults()", c.Name)
		}
	case OpSet:
		if len(c.Changes) == 0 {
			return invalidf("invalid controller command: set of topic %q changes nothing; give at least one attribute", c.Name)
		}
	case OpDelete:
	default:
		return invalidf("invalid controller command: unknown op %q; use %s, %s or %s", c.Op, OpCreate, OpSet, OpDelete)
	}
	if c.Op != OpCreate && c.Attributes != nil {
		return invalidf("invalid controller command: %s of topic %q has attributes, which only create takes; use changes", c.Op, c.Name)
	}
	if c.Op != OpCreate && c.Members != nil {
		return invalidf("invalid controller command: %s of topic %q has members, which only create takes", c.Op, c.Name)
	}
	if slices.Contains(c.Members, 0) {
		return invalidf("invalid controller command: create of topic %q names node 0 among its members; node ids start at 1", c.Name)
	}
	if c.Op != OpSet && c.Changes != nil {
		return invalidf("invalid controller command: %s of topic %q has changes, which only set takes", c.Op, c.Name)
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return &detailError{topic.ErrInvalid, fmt.Sprintf(format, args...)}
}
