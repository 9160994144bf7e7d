package sns

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"herald/internal/node"
)

type topicArnResult struct {
	TopicArn string
}

// createTopic creates a topic, or, as Ceph does, updates the attributes
// of an existing one with those given.
func (h *Handler) createTopic(ctx context.Context, r *request) (any, error) {
	name, err := r.require("Name")
	if err != nil {
		return nil, err
	}
	attrs, err := parseAttributes(r.form)
	if err != nil {
		return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	_, err = h.node.CreateTopic(ctx, name, attrs)
	if errors.Is(err, node.ErrExists) && len(attrs) > 0 {
		_, err = h.node.SetTopicAttributes(ctx, name, attrs)
	} else if errors.Is(err, node.ErrExists) {
		err = nil
	}
	if err != nil {
		return nil, attributeError(err)
	}
	return topicArnResult{TopicArn: h.arns.of(name)}, nil
}

// attributeMap is SNS's XML form of a map of attributes.
type attributeMap struct {
	Entries []attributeEntry `xml:"entry"`
}

type attributeEntry struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

// arnTopic returns the topic the request's TopicArn names.
func (h *Handler) arnTopic(r *request) (node.Topic, error) {
	name, err := h.topicName(r, "TopicArn")
	if err != nil {
		return node.Topic{}, err
	}
	t, err := h.node.GetTopic(name)
	if err != nil {
		return node.Topic{}, nodeError(err)
	}
	return t, nil
}

func attributeMapOf(m map[string]string) attributeMap {
	var am attributeMap
	for _, k := range slices.Sorted(maps.Keys(m)) {
		am.Entries = append(am.Entries, attributeEntry{Key: k, Value: m[k]})
	}
	return am
}

func (h *Handler) getTopicAttributes(_ context.Context, r *request) (any, error) {
	t, err := h.arnTopic(r)
	if err != nil {
		return nil, err
	}
	attrs := shownAttributes(t.Attributes)
	attrs["TopicArn"] = h.arns.of(t.Name)
	attrs["Name"] = t.Name
	return struct{ Attributes attributeMap }{attributeMapOf(attrs)}, nil
}

func (h *Handler) setTopicAttributes(ctx context.Context, r *request) (any, error) {
	name, err := h.topicName(r, "TopicArn")
	if err != nil {
		return nil, err
	}
	attr, err := r.require("AttributeName")
	if err != nil {
		return nil, err
	}
	hname, value, err := toHerald(attr, r.get("AttributeValue"))
	if err != nil {
		return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	if _, err := h.node.SetTopicAttributes(ctx, name, map[string]string{hname: value}); err != nil {
		return nil, attributeError(err)
	}
	return nil, nil
}

// attributeError is nodeError, naming Ceph's attribute names too when the
// node refused an attribute it does not know.
func attributeError(err error) error {
	e := nodeError(err)
	if ae, ok := e.(*apiError); ok && strings.Contains(ae.msg, "unknown attribute") {
		ae.msg += "; or Ceph's " + strings.Join(slices.Sorted(maps.Keys(cephNames)), ", ")
	}
	return e
}

type listTopicsResult struct {
	Topics struct {
		Members []topicArnResult `xml:"member"`
	}
}

// listTopics lists every topic in one page.
func (h *Handler) listTopics(context.Context, *request) (any, error) {
	var res listTopicsResult
	for _, t := range h.node.ListTopics() {
		res.Topics.Members = append(res.Topics.Members, topicArnResult{TopicArn: h.arns.of(t.Name)})
	}
	return res, nil
}

// deleteTopic deletes a topic; deleting one that does not exist succeeds,
// as in SNS.
func (h *Handler) deleteTopic(ctx context.Context, r *request) (any, error) {
	name, err := h.topicName(r, "TopicArn")
	if err != nil {
		return nil, err
	}
	if err := h.node.DeleteTopic(ctx, name); err != nil && !errors.Is(err, node.ErrNotFound) {
		return nil, nodeError(err)
	}
	return nil, nil
}

// getTopicResult is Ceph's GetTopic result.
type getTopicResult struct {
	Topic struct {
		User     string
		Name     string
		EndPoint struct {
			EndpointAddress string
			EndpointArgs    string
			EndpointTopic   string
			HasStoredSecret bool
			Persistent      bool
		}
		TopicArn   string
		OpaqueData string
	}
}

func (h *Handler) getTopic(_ context.Context, r *request) (any, error) {
	t, err := h.arnTopic(r)
	if err != nil {
		return nil, err
	}
	var res getTopicResult
	res.Topic.Name = t.Name
	res.Topic.TopicArn = h.arns.of(t.Name)
	res.Topic.OpaqueData = t.Attributes["opaque_data"]
	ep := &res.Topic.EndPoint
	ep.EndpointAddress = t.Attributes["push_endpoint"]
	ep.EndpointTopic = t.Name
	ep.Persistent, _ = strconv.ParseBool(t.Attributes["persistent"])
	ep.HasStoredSecret = t.Attributes["signing_secret"] != ""
	args := url.Values{}
	for name, value := range shownAttributes(t.Attributes) {
		args.Set(name, value)
	}
	ep.EndpointArgs = args.Encode()
	return res, nil
}

type publishResult struct {
	MessageID string `xml:"MessageId"`
}

// publish publishes Message as one event: MessageGroupId is its key,
// MessageDeduplicationId its dedup id, Subject and string
// MessageAttributes its headers.
func (h *Handler) publish(ctx context.Context, r *request) (any, error) {
	name, err := h.topicName(r, "TopicArn", "TargetArn")
	if err != nil {
		return nil, err
	}
	msg, err := r.require("Message")
	if err != nil {
		return nil, err
	}
	headers, err := messageAttributes(r.form)
	if err != nil {
		return nil, &apiError{code: codeInvalidParameter, msg: err.Error()}
	}
	if s := r.get("Subject"); s != "" {
		headers["Subject"] = s
	}
	ev := node.Event{Key: r.get("MessageGroupId"), Payload: []byte(msg), DedupID: r.get("MessageDeduplicationId")}
	if len(headers) > 0 {
		ev.Headers = headers
	}
	ids, err := h.node.Publish(ctx, name, []node.Event{ev})
	if err != nil {
		return nil, nodeError(err)
	}
	return publishResult{MessageID: ids[0]}, nil
}

// messageAttributes reads MessageAttributes.entry.N.Name and
// .Value.StringValue (or .Value.BinaryValue, kept base64) as headers.
func messageAttributes(form map[string][]string) (map[string]string, error) {
	headers := map[string]string{}
	for param, values := range form {
		rest, ok := strings.CutPrefix(param, "MessageAttributes.entry.")
		if !ok {
			continue
		}
		n, field, ok := strings.Cut(rest, ".")
		if !ok || field != "Name" {
			continue
		}
		prefix := "MessageAttributes.entry." + n + ".Value."
		value, found := "", false
		for _, f := range []string{"StringValue", "BinaryValue"} {
			if v, ok := form[prefix+f]; ok {
				value, found = v[0], true
			}
		}
		if !found {
			return nil, fmt.Errorf("message attribute %s has no Value.StringValue or Value.BinaryValue", values[0])
		}
		headers[values[0]] = value
	}
	return headers, nil
}
