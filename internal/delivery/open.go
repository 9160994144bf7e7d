package delivery

import (
	"fmt"

	"herald/internal/endpoint"
	"herald/internal/endpoint/amqp"
	"herald/internal/endpoint/kafka"
	"herald/internal/endpoint/nats"
	"herald/internal/endpoint/webhook"
	"herald/internal/topic"
)

// OpenEndpoint returns the endpoint for a topic's push_endpoint. It does
// not connect: endpoints connect on first use and reconnect after failures.
func OpenEndpoint(topicName string, a topic.Attributes) (endpoint.Endpoint, error) {
	u, err := topic.ParseEndpoint(a.PushEndpoint)
	if err != nil {
		return nil, fmt.Errorf("push endpoint %s of topic %q: %w", topic.RedactEndpoint(a.PushEndpoint), topicName, err)
	}
	switch u.Scheme {
	case "http", "https":
		return webhook.New(topicName, a)
	case "amqp", "amqps":
		return amqp.New(topicName, a)
	case "kafka":
		return kafka.New(topicName, a)
	case "nats":
		return nats.New(topicName, a)
	}
	return nil, fmt.Errorf("push endpoint of topic %q: unsupported scheme %q; use http, https, amqp, amqps, kafka or nats", topicName, u.Scheme)
}
