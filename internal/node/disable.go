package node

import (
	"time"

	"herald/internal/alert"
	"herald/internal/backoff"
	"herald/internal/push"
)

// disableRetry paces the attempts to record a subscription disabled
// while the controller cannot take it.
var disableRetry = backoff.Policy{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2}

// disableGivenUp records disabled a subscription whose dispatcher gave up
// on its endpoint (push.Config.OnDisable), tells the operator, and lets
// the push supervisor stop its dispatchers when the change reaches it. It
// is called on a dispatcher's goroutine, so the work goes to one of the
// node's own, which tries until the controller takes it or the node
// stops: until then the dispatcher sends nothing, and its events wait.
func (n *Node) disableGivenUp(topicName string, sub push.Subscription, reason string) {
	n.log.Warn("subscription disabled: its endpoint is gone or kept failing; its events are kept until it is enabled again (herald subscription enable)",
		"topic", topicName, "subscription", sub.Name, "reason", reason)
	n.delivery.subscriptionDisabled(topicName, sub.Name)
	n.wg.Go(func() {
		ctx, cancel := untilClosed(n.stop)
		defer cancel()
		retry := backoff.New(disableRetry)
		for {
			_, err := n.DisableSubscription(ctx, topicName, sub.Name, reason)
			if err == nil || ctx.Err() != nil {
				break
			}
			n.log.Warn("cannot record the subscription disabled yet; trying again", "topic", topicName, "subscription", sub.Name, "err", err)
			backoff.Sleep(ctx, retry.Next())
		}
		n.alert(alert.SubscriptionDisabled, topicName, sub.Name, reason)
	})
}

// alert tells the operator's webhook, if there is one.
func (n *Node) alert(t alert.Type, topicName, sub, reason string) {
	if n.alerts != nil {
		n.alerts.Notify(alert.Alert{Type: t, Topic: topicName, Subscription: sub, Reason: reason})
	}
}
