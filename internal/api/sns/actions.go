package sns

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
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

// getTopicAttributes answers herald's attributes, named as shownAttributes
// names them, and the attributes Ceph answers with (cephTopic), so
// tools written against either read them.
func (h *Handler) getTopicAttributes(_ context.Context, r *request) (any, error) {
	t, err := h.arnTopic(r)
	if err != nil {
		return nil, err
	}
	attrs := shownAttributes(t.Attributes)
	maps.Copy(attrs, h.cephTopicOf(t).attributes())
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

// perPage is how many topics or subscriptions a page of ListTopics,
// ListSubscriptions or ListSubscriptionsByTopic holds, as in SNS.
const perPage = 100

type listTopicsResult struct {
	Topics struct {
		Members []topicArnResult `xml:"member"`
	}
	NextToken string `xml:",omitempty"`
}

// listTopics lists the topics in order of name, perPage at a time (see
// page).
func (h *Handler) listTopics(_ context.Context, r *request) (any, error) {
	topics, next, err := page(h.node.ListTopics(), func(t node.Topic) string { return t.Name }, r)
	if err != nil {
		return nil, err
	}
	res := listTopicsResult{NextToken: next}
	for _, t := range topics {
		res.Topics.Members = append(res.Topics.Members, topicArnResult{TopicArn: h.arns.of(t.Name)})
	}
	return res, nil
}

// page returns the page of items, which are sorted by key, that the
// request's NextToken starts, perPage at most, and the NextToken of the page after it ("" for
// the last). A page's NextToken names its last item's key and the next
// page starts after that key, so items created or deleted between the
// calls shift no other item into a second page or out of every page.
func page[T any](items []T, key func(T) string, r *request) ([]T, string, error) {
	after, err := pageStart(r.get("NextToken"), r.action)
	if err != nil {
		return nil, "", err
	}
	start, found := slices.BinarySearchFunc(items, after, func(item T, k string) int {
		return strings.Compare(key(item), k)
	})
	if found {
		start++
	}
	end := min(start+perPage, len(items))
	next := ""
	if end < len(items) {
		next = pageToken(key(items[end-1]))
	}
	return items[start:end], next, nil
}

// pageToken is the NextToken of a page ending at an item: its key,
// base64-encoded so that clients treat it as opaque.
func pageToken(lastKey string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(lastKey))
}

// pageStart returns the key a page of action's starts after: that of the
// token, or "" for the first page.
func pageStart(token, action string) (string, error) {
	if token == "" {
		return "", nil
	}
	key, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(key) == 0 {
		return "", &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("NextToken %q is not one herald gave; pass the NextToken of the previous %s response unchanged, or none for the first page", token, action)}
	}
	return string(key), nil
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

// getTopic answers the topic as Ceph describes it.
func (h *Handler) getTopic(_ context.Context, r *request) (any, error) {
	t, err := h.arnTopic(r)
	if err != nil {
		return nil, err
	}
	return struct{ Topic cephTopic }{h.cephTopicOf(t)}, nil
}
