package delivery

import (
	"fmt"
	"strings"

	"herald/internal/endpoint"
	"herald/internal/endpoint/amqp"
	"herald/internal/endpoint/kafka"
	"herald/internal/endpoint/nats"
	"herald/internal/endpoint/webhook"
	"herald/internal/topic"
)

// OpenEndpoint returns the endpoint for a topic's push_endpoint. It does
// not connect: endpoints connect on first use and reconnect after failures,
// and only to addresses g allows.
// Which schemes there are, and which protocol each speaks, is topic's
// scheme table (topic.Schemes); this only maps a protocol to its package.
func OpenEndpoint(topicName string, a topic.Attributes, g *endpoint.Guard) (endpoint.Endpoint, error) {
	u, err := topic.ParseEndpoint(a.PushEndpoint)
	if err != nil {
		return nil, fmt.Errorf("push endpoint %s of topic %q: %w", topic.RedactEndpoint(a.PushEndpoint), topicName, err)
	}
	scheme, ok := topic.LookupScheme(u.Scheme)
	if !ok {
		return nil, fmt.Errorf("push endpoint of topic %q: unsupported scheme %q; use one of %s", topicName, u.Scheme, strings.Join(topic.SchemeNames(false), ", "))
	}
	switch scheme.Protocol {
	case topic.ProtocolWebhook:
		return webhook.New(topicName, a, g)
	case topic.ProtocolAMQP:
		return amqp.New(topicName, a, g)
	case topic.ProtocolKafka:
		return kafka.New(topicName, a, g)
	case topic.ProtocolNATS:
		return nats.New(topicName, a, g)
	}
	// A scheme added to topic's table without a package to deliver to it.
	return nil, fmt.Errorf("push endpoint of topic %q: herald has no endpoint for scheme %q", topicName, u.Scheme)
}
