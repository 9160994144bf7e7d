package controller

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"unicode/utf8"

	"herald/internal/topic"
)

// The operations a Command can perform.
const (
	OpCreate = "create" // create topic Name with Attributes
	OpSet    = "set"    // apply Changes to the attributes of topic Name
	OpDelete = "delete" // delete topic Name

	// Membership: which nodes the cluster has, and which hold each shard.
	OpAddNode       = "add-node"       // Node joins the cluster at Address
	OpDrainNode     = "drain-node"     // Node's replicas are to move off it; no new shard is placed on it
	OpForgetNode    = "forget-node"    // a drained Node, holding no replica, leaves the cluster
	OpAddReplica    = "add-replica"    // shard Shard of topic Name gains a replica on Node
	OpRemoveReplica = "remove-replica" // shard Shard of topic Name loses its replica on Node

	// Rebalancing: spreading replicas and preferred leaders evenly.
	OpRebalance     = "rebalance"      // a rebalance starts (see State.RebalanceStep)
	OpRebalanceDone = "rebalance-done" // the rebalance has nothing left to do
	OpMoveReplica   = "move-replica"   // shard Shard of topic Name gains a replica on To, to replace the one on Node
	OpSetPreferred  = "set-preferred"  // Node, a replica of shard Shard of topic Name, becomes its preferred leader

	// OpNameCluster gives the cluster its id, Cluster, unless it has one:
	// the first leader of the controller proposes it, so a cluster
	// started from --peers alone gets one id on every node.
	OpNameCluster = "name-cluster"
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
	// Members are the ids of the cluster's nodes as the proposer knows
	// them (its --peers). A created topic's shards are placed over them
	// (see Place) while the state records no members; none places the
	// shards on node 1, as before herald had clusters. The node ops use
	// them to record the members the cluster started with, the first
	// time membership changes.
	Members []uint64 `json:"members,omitempty"`
	// Node is the node a node or replica op is about.
	Node uint64 `json:"node,omitempty"`
	// Address is where a node added by OpAddNode listens (host:port).
	Address string `json:"address,omitempty"`
	// Shard is the shard of topic Name a replica op is about.
	Shard int `json:"shard,omitempty"`
	// To is the node OpMoveReplica moves the replica on Node to.
	To uint64 `json:"to,omitempty"`
	// Cluster is the cluster id OpNameCluster gives.
	Cluster string `json:"cluster,omitempty"`
	// Subscription is the name of the subscription of topic Name a
	// subscription op is about.
	Subscription string `json:"subscription,omitempty"`
	// SubscriptionAttributes are the complete attributes of a created
	// subscription, usually topic.NewSubscriptionAttributes(what the user
	// asked for). Only for OpCreateSubscription, and not for the default
	// subscription, whose settings are its topic's.
	SubscriptionAttributes *topic.SubscriptionAttributes `json:"subscription_attributes,omitempty"`
	// Reason says why OpDisableSubscription disables a subscription.
	Reason string `json:"reason,omitempty"`
	// Object is the name of the object in the object store a tiering op
	// is about.
	Object string `json:"object,omitempty"`
	// Runs are the ranges of log entries object Object holds. Only for
	// OpRecordTierObject.
	Runs []TierRun `json:"runs,omitempty"`
	// Time is when the command was proposed, in Unix nanoseconds. The
	// proposer chooses it, so that every replica records the same time.
	Time int64 `json:"time"`
}

// Marshal encodes c for proposing.
func (c Command) Marshal() []byte {
	data, err := json.Marshal(c)
	if err != nil {
		// Command holds only strings, numbers, booleans, string maps and
		// structs of these, which always encode.
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
	if slices.Contains(ops, c.Op) && !slices.Contains(subscriptionOps, c.Op) &&
		(c.Subscription != "" || c.SubscriptionAttributes != nil || c.Reason != "") {
		return invalidf("invalid controller command: %s names a subscription, subscription attributes or a reason, which only the subscription ops take", c.Op)
	}
	if slices.Contains(ops, c.Op) && !slices.Contains(tierOps, c.Op) && (c.Object != "" || c.Runs != nil) {
		return invalidf("invalid controller command: %s names a tiered object or runs, which only the tiering ops take", c.Op)
	}
	switch c.Op {
	case OpRecordTierObject, OpForgetTierObject:
		return c.checkTierFields()
	case OpCreateSubscription, OpSetSubscription, OpDeleteSubscription, OpEnableSubscription, OpDisableSubscription:
		return c.checkSubscriptionFields()
	case OpCreate:
		if c.Attributes == nil {
			return invalidf("invalid controller command: create of topic %q has no attributes; start from topic.Defaults()", c.Name)
		}
	case OpSet:
		if len(c.Changes) == 0 {
			return invalidf("invalid controller command: set of topic %q changes nothing; give at least one attribute", c.Name)
		}
	case OpDelete:
	case OpAddNode, OpDrainNode, OpForgetNode, OpAddReplica, OpRemoveReplica, OpMoveReplica, OpSetPreferred:
		return c.checkMembershipFields()
	case OpRebalance, OpRebalanceDone, OpNameCluster:
		if c.Name != "" || c.Node != 0 || c.To != 0 || c.Address != "" || c.Shard != 0 || c.Attributes != nil || c.Changes != nil || c.Members != nil {
			return invalidf("invalid controller command: %s takes no topic, node, shard, attributes or members", c.Op)
		}
		if (c.Op == OpNameCluster) != (c.Cluster != "") {
			return invalidf("invalid controller command: %s with cluster id %q; only %s gives one, and it must", c.Op, c.Cluster, OpNameCluster)
		}
		return nil
	default:
		return invalidf("invalid controller command: unknown op %q; use %s", c.Op, strings.Join(ops, ", "))
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
	if c.Node != 0 || c.Address != "" || c.Shard != 0 {
		return invalidf("invalid controller command: %s of topic %q names a node, address or shard, which only membership ops take", c.Op, c.Name)
	}
	return nil
}

// ops are the valid values of Command.Op.
var ops = []string{OpCreate, OpSet, OpDelete, OpAddNode, OpDrainNode, OpForgetNode, OpAddReplica, OpRemoveReplica,
	OpRebalance, OpRebalanceDone, OpMoveReplica, OpSetPreferred, OpNameCluster,
	OpCreateSubscription, OpSetSubscription, OpDeleteSubscription, OpEnableSubscription, OpDisableSubscription,
	OpRecordTierObject, OpForgetTierObject}

// tierOps are the ops about the manifest of tiered objects.
var tierOps = []string{OpRecordTierObject, OpForgetTierObject}

// subscriptionOps are the ops about one subscription of a topic.
var subscriptionOps = []string{OpCreateSubscription, OpSetSubscription, OpDeleteSubscription, OpEnableSubscription, OpDisableSubscription}

// checkSubscriptionFields is checkFields for the subscription ops.
func (c *Command) checkSubscriptionFields() error {
	what := fmt.Sprintf("%s of subscription %q of topic %q", c.Op, c.Subscription, c.Name)
	if c.Subscription == "" {
		return invalidf("invalid controller command: %s of topic %q names no subscription", c.Op, c.Name)
	}
	if c.Attributes != nil || c.Members != nil || c.Node != 0 || c.Address != "" || c.Shard != 0 || c.To != 0 || c.Cluster != "" {
		return invalidf("invalid controller command: %s has topic attributes, members, a node, an address, a shard or a cluster id, which subscription ops do not take", what)
	}
	isDefault := c.Subscription == topic.DefaultSubscriptionName
	switch {
	case c.Op == OpCreateSubscription && c.SubscriptionAttributes == nil && !isDefault:
		return invalidf("invalid controller command: %s has no attributes; start from topic.DefaultSubscriptionAttributes()", what)
	case c.Op == OpCreateSubscription && c.SubscriptionAttributes != nil && isDefault:
		return invalidf("the default subscription of topic %q takes no attributes: it delivers with the topic's own (herald topic set %s changes them); create it without attributes, or give the subscription another name", c.Name, c.Name)
	case c.Op != OpCreateSubscription && c.SubscriptionAttributes != nil:
		return invalidf("invalid controller command: %s has attributes, which only %s takes; use changes", what, OpCreateSubscription)
	case c.Op == OpSetSubscription && len(c.Changes) == 0:
		return invalidf("invalid controller command: %s changes nothing; give at least one attribute", what)
	case c.Op != OpSetSubscription && c.Changes != nil:
		return invalidf("invalid controller command: %s has changes, which only %s takes", what, OpSetSubscription)
	case c.Op != OpDisableSubscription && c.Reason != "":
		return invalidf("invalid controller command: %s has a reason, which only %s takes", what, OpDisableSubscription)
	case len(c.Reason) > MaxReasonLen || !utf8.ValidString(c.Reason):
		return invalidf("the reason for disabling subscription %q of topic %q is not UTF-8 text of at most %d bytes; shorten it", c.Subscription, c.Name, MaxReasonLen)
	}
	return nil
}

// checkMembershipFields is checkFields for the node and replica ops.
func (c *Command) checkMembershipFields() error {
	if c.Node == 0 {
		return invalidf("invalid controller command: %s names no node (or node 0); node ids start at 1", c.Op)
	}
	if slices.Contains(c.Members, 0) {
		return invalidf("invalid controller command: %s names node 0 among the members; node ids start at 1", c.Op)
	}
	if c.Attributes != nil || c.Changes != nil {
		return invalidf("invalid controller command: %s of node %d has attributes or changes, which only topic ops take", c.Op, c.Node)
	}
	replicaOp := c.Op == OpAddReplica || c.Op == OpRemoveReplica || c.Op == OpMoveReplica || c.Op == OpSetPreferred
	if c.Op == OpMoveReplica && (c.To == 0 || c.To == c.Node) {
		return invalidf("invalid controller command: %s of node %d moves it to node %d; name another node, from 1 up", c.Op, c.Node, c.To)
	}
	if c.Op != OpMoveReplica && c.To != 0 {
		return invalidf("invalid controller command: %s of node %d names a node to move to, which only %s takes", c.Op, c.Node, OpMoveReplica)
	}
	if !replicaOp && (c.Name != "" || c.Shard != 0) {
		return invalidf("invalid controller command: %s of node %d names a topic or shard; only replica ops do", c.Op, c.Node)
	}
	if c.Shard < 0 {
		return invalidf("invalid controller command: %s names shard %d; shards are numbered from 0", c.Op, c.Shard)
	}
	if c.Op == OpAddNode {
		if _, _, err := net.SplitHostPort(c.Address); err != nil {
			return invalidf("invalid node address %q for node %d: %v; give host:port, as in --peers", c.Address, c.Node, err)
		}
	} else if c.Address != "" {
		return invalidf("invalid controller command: %s of node %d has an address, which only %s takes", c.Op, c.Node, OpAddNode)
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return &detailError{topic.ErrInvalid, fmt.Sprintf(format, args...)}
}
