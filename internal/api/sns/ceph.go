package sns

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"

	"herald/internal/node"
)

// A cephTopic is a topic as Ceph's RADOS Gateway describes it: the result
// of its GetTopic, and the attributes its GetTopicAttributes answers with.
type cephTopic struct {
	// User is the user who created the topic in Ceph. herald's topics
	// belong to no user, so it is empty.
	User       string
	Name       string
	EndPoint   cephEndpoint
	TopicArn   string
	OpaqueData string
}

// A cephEndpoint is where a topic pushes its events, in Ceph's terms: an
// element of GetTopic's result, and the JSON of GetTopicAttributes'
// EndPoint attribute.
type cephEndpoint struct {
	// EndpointAddress is the push endpoint, its secrets redacted as
	// herald shows them everywhere.
	EndpointAddress string
	// EndpointArgs are the topic's attributes, URL-encoded as Ceph keeps
	// the arguments a topic was created with.
	EndpointArgs string
	// EndpointTopic is the topic name sent to the endpoint: herald sends
	// the topic's own.
	EndpointTopic string
	// HasStoredSecret says whether herald keeps a secret of the endpoint:
	// credentials in its URI, as in Ceph, or a signing secret.
	HasStoredSecret bool
	Persistent      bool
}

func (h *Handler) cephTopicOf(t node.Topic) cephTopic {
	address := t.Attributes["push_endpoint"]
	persistent, _ := strconv.ParseBool(t.Attributes["persistent"])
	args := url.Values{}
	for name, value := range shownAttributes(t.Attributes) {
		args.Set(name, value)
	}
	return cephTopic{
		Name:       t.Name,
		TopicArn:   h.arns.of(t.Name),
		OpaqueData: t.Attributes["opaque_data"],
		EndPoint: cephEndpoint{
			EndpointAddress: address,
			EndpointArgs:    args.Encode(),
			EndpointTopic:   t.Name,
			HasStoredSecret: hasCredentials(address) || t.Attributes["signing_secret"] != "",
			Persistent:      persistent,
		},
	}
}

// hasCredentials reports whether a push endpoint URI carries a user or a
// password (redacted or not). Of a URI that does not parse, it says yes
// if it has an '@' at all, rather than deny a secret it cannot rule out.
func hasCredentials(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return strings.Contains(uri, "@")
	}
	return u.User != nil
}

// attributes returns the topic as GetTopicAttributes' attributes, with
// Ceph's names: EndPoint is the endpoint's JSON.
func (c cephTopic) attributes() map[string]string {
	endpoint, _ := json.Marshal(c.EndPoint) // strings and booleans: cannot fail
	return map[string]string{
		"User":       c.User,
		"Name":       c.Name,
		"EndPoint":   string(endpoint),
		"TopicArn":   c.TopicArn,
		"OpaqueData": c.OpaqueData,
	}
}
