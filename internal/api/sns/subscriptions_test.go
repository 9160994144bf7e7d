package sns

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// A confirmation is what a receiver got from Subscribe.
type confirmation struct {
	header http.Header
	doc    struct {
		Type, MessageId, Token, TopicArn, Message, SubscribeURL, Timestamp, SignatureVersion string
	}
}

// receiver starts an HTTP endpoint that answers status and passes on the
// SubscriptionConfirmations it gets.
func receiver(t *testing.T, status int) (*httptest.Server, <-chan confirmation) {
	t.Helper()
	got := make(chan confirmation, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c confirmation
		c.header = r.Header
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &c.doc); err != nil {
			t.Errorf("receiver: body %s: %v", body, err)
		}
		got <- c
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// errorOf decodes an SNS error document.
func errorOf(t *testing.T, body string) errorResponse {
	t.Helper()
	var resp errorResponse
	if err := xml.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return resp
}

// fails calls h and expects an SNS error of code and status saying says.
func fails(t *testing.T, h http.Handler, status int, code, says string, params ...string) {
	t.Helper()
	got, body := call(t, h, params...)
	resp := errorOf(t, body)
	if got != status || resp.Error.Code != code || !strings.Contains(resp.Error.Message, says) {
		t.Errorf("%v: %d %s, want %d %s saying %q", params, got, body, status, code, says)
	}
}

// subscriptionAttributes decodes a GetSubscriptionAttributes response.
func subscriptionAttributes(t *testing.T, h http.Handler, arn string) map[string]string {
	t.Helper()
	var resp struct {
		Attributes attributeMap `xml:"GetSubscriptionAttributesResult>Attributes"`
	}
	body := mustCall(t, h, "Action", "GetSubscriptionAttributes", "SubscriptionArn", arn)
	if err := xml.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range resp.Attributes.Entries {
		m[e.Key] = e.Value
	}
	return m
}

// elements returns the text of every element called name in body.
func elements(body, name string) []string {
	var texts []string
	for _, m := range regexp.MustCompile("<"+name+">([^<]*)</"+name+">").FindAllStringSubmatch(body, -1) {
		texts = append(texts, html.UnescapeString(m[1]))
	}
	return texts
}

func subscriptionArnOf(t *testing.T, body string) string {
	t.Helper()
	arns := elements(body, "SubscriptionArn")
	if len(arns) != 1 {
		t.Fatalf("no SubscriptionArn in %s", body)
	}
	return arns[0]
}

func TestSubscribeConfirmUnsubscribe(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{Zonegroup: "zg1"})
	const topicARN = "arn:aws:sns:zg1::orders"
	mustCall(t, h, "Action", "CreateTopic", "Name", "orders")
	hook, confirmations := receiver(t, http.StatusOK)
	endpoint := hook.URL + "/sns"
	subscribe := []string{"Action", "Subscribe", "TopicArn", topicARN, "Protocol", "http", "Endpoint", endpoint,
		"Attributes.entry.1.key", "FilterPolicy", "Attributes.entry.1.value", `{"color": ["red"]}`}

	if arn := subscriptionArnOf(t, mustCall(t, h, subscribe...)); arn != "pending confirmation" {
		t.Fatalf("Subscribe answered %q, want SNS's %q", arn, "pending confirmation")
	}
	c := <-confirmations
	name := snsName(endpoint)
	arn := topicARN + ":" + name
	if c.doc.Type != "SubscriptionConfirmation" || c.doc.TopicArn != topicARN || !strings.HasPrefix(c.doc.Token, name+".") ||
		c.header.Get("x-amz-sns-message-type") != "SubscriptionConfirmation" || c.header.Get("x-amz-sns-topic-arn") != topicARN ||
		c.header.Get("Content-Type") != "text/plain; charset=UTF-8" {
		t.Fatalf("confirmation %+v %v", c.doc, c.header)
	}
	u, err := url.Parse(c.doc.SubscribeURL)
	if err != nil || u.Query().Get("Token") != c.doc.Token || u.Query().Get("TopicArn") != topicARN || u.Query().Get("Action") != "ConfirmSubscription" {
		t.Fatalf("SubscribeURL %q", c.doc.SubscribeURL)
	}
	sub, err := n.GetSubscription(context.Background(), "orders", name)
	if err != nil || !sub.Disabled || sub.Attributes["message_format"] != "sns" || sub.Attributes["filter_policy"] != `{"color": ["red"]}` {
		t.Fatalf("pending subscription %+v (%v)", sub, err)
	}
	if strings.Contains(sub.DisabledReason, c.doc.Token) {
		t.Fatal("the subscription keeps its token: reading it would confirm it")
	}
	attrs := subscriptionAttributes(t, h, arn)
	for k, want := range map[string]string{
		"SubscriptionArn": arn, "TopicArn": topicARN, "Protocol": "http", "Endpoint": endpoint, "Owner": "",
		"PendingConfirmation": "true", "ConfirmationWasAuthenticated": "false", "RawMessageDelivery": "false",
		"FilterPolicy": `{"color": ["red"]}`, "FilterPolicyScope": "MessageAttributes", "message_format": "sns", "disabled": "false",
	} {
		if attrs[k] != want {
			t.Errorf("pending: attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	if body := mustCall(t, h, "Action", "ListSubscriptionsByTopic", "TopicArn", topicARN); !strings.Contains(body, "<SubscriptionArn>PendingConfirmation</SubscriptionArn>") {
		t.Errorf("ListSubscriptionsByTopic of a pending subscription: %s", body)
	}

	fails(t, h, 400, codeInvalidParameter, "Invalid token", "Action", "ConfirmSubscription", "TopicArn", topicARN, "Token", name+".00")
	fails(t, h, 400, codeInvalidParameter, "Invalid token", "Action", "ConfirmSubscription", "TopicArn", topicARN, "Token", "nonsense")
	for range 2 { // the second changes nothing
		if got := subscriptionArnOf(t, mustCall(t, h, "Action", "ConfirmSubscription", "TopicArn", topicARN, "Token", c.doc.Token)); got != arn {
			t.Fatalf("ConfirmSubscription answered %q, want %q", got, arn)
		}
	}
	if sub, _ := n.GetSubscription(context.Background(), "orders", name); sub.Disabled {
		t.Fatalf("confirmed subscription still disabled: %s", sub.DisabledReason)
	}
	if attrs := subscriptionAttributes(t, h, arn); attrs["PendingConfirmation"] != "false" {
		t.Errorf("confirmed: PendingConfirmation %q", attrs["PendingConfirmation"])
	}

	// Subscribing the endpoint again finds the subscription; with other
	// attributes it is an error, as in SNS.
	if got := subscriptionArnOf(t, mustCall(t, h, append(subscribe, "ReturnSubscriptionArn", "true")...)); got != arn {
		t.Errorf("Subscribe again: %q, want %q", got, arn)
	}
	if len(confirmations) != 0 {
		t.Error("subscribing a confirmed endpoint again sent another confirmation")
	}
	fails(t, h, 400, codeInvalidParameter, "filter_policy", "Action", "Subscribe", "TopicArn", topicARN, "Protocol", "http", "Endpoint", endpoint)

	mustCall(t, h, "Action", "SetSubscriptionAttributes", "SubscriptionArn", arn, "AttributeName", "RawMessageDelivery", "AttributeValue", "true")
	mustCall(t, h, "Action", "SetSubscriptionAttributes", "SubscriptionArn", arn, "AttributeName", "FilterPolicy", "AttributeValue", `{"size": [{"numeric": [">", 3]}]}`)
	mustCall(t, h, "Action", "SetSubscriptionAttributes", "SubscriptionArn", arn, "AttributeName", "max_retries", "AttributeValue", "4")
	attrs = subscriptionAttributes(t, h, arn)
	if attrs["RawMessageDelivery"] != "true" || attrs["FilterPolicy"] != `{"size": [{"numeric": [">", 3]}]}` || attrs["max_retries"] != "4" {
		t.Errorf("after SetSubscriptionAttributes: %v", attrs)
	}
	fails(t, h, 400, codeInvalidParameter, "cannot change", "Action", "SetSubscriptionAttributes", "SubscriptionArn", arn, "AttributeName", "push-endpoint", "AttributeValue", "http://127.0.0.1:1/")
	fails(t, h, 400, codeInvalidParameter, "DeliveryPolicy", "Action", "SetSubscriptionAttributes", "SubscriptionArn", arn, "AttributeName", "DeliveryPolicy", "AttributeValue", "{}")
	fails(t, h, 400, codeInvalidParameter, `key "size"`, "Action", "SetSubscriptionAttributes", "SubscriptionArn", arn, "AttributeName", "FilterPolicy", "AttributeValue", `{"size": [{"numeric": ["~", 3]}]}`)

	mustCall(t, h, "Action", "Unsubscribe", "SubscriptionArn", arn)
	fails(t, h, 404, codeNotFound, name, "Action", "Unsubscribe", "SubscriptionArn", arn)
	fails(t, h, 404, codeNotFound, name, "Action", "GetSubscriptionAttributes", "SubscriptionArn", arn)
}

// A confirmation that cannot be delivered leaves nothing subscribed.
func TestSubscribeUnreachableEndpoint(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	mustCall(t, h, "Action", "CreateTopic", "Name", "t")
	hook, _ := receiver(t, http.StatusForbidden)
	fails(t, h, 400, codeInvalidParameter, "Unreachable Endpoint", "Action", "Subscribe", "TopicArn", "arn:aws:sns:default::t", "Protocol", "http", "Endpoint", hook.URL)
	if subs, _ := n.ListSubscriptions(context.Background(), "t"); len(subs) != 1 { // the default one
		t.Fatalf("subscriptions after a failed Subscribe: %+v", subs)
	}
}

// The receiver visits the SubscribeURL, from wherever it runs; other
// Actions stay closed to remote callers without tokens.
func TestConfirmBySubscribeURL(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	mustCall(t, h, "Action", "CreateTopic", "Name", "t")
	hook, confirmations := receiver(t, http.StatusOK)
	mustCall(t, h, "Action", "Subscribe", "TopicArn", "arn:aws:sns:default::t", "Protocol", "http", "Endpoint", hook.URL)
	c := <-confirmations
	u, _ := url.Parse(c.doc.SubscribeURL)
	if u.Host != "example.com" { // httptest.NewRequest's
		t.Errorf("SubscribeURL %s, want it at the host Subscribe was called at", u)
	}
	req := httptest.NewRequest(http.MethodGet, u.RequestURI(), nil)
	req.RemoteAddr = "192.0.2.7:5000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "<ConfirmSubscriptionResult><SubscriptionArn>arn:aws:sns:default::t:") {
		t.Fatalf("GET SubscribeURL: %d %s", w.Code, w.Body)
	}
	if sub, _ := n.GetSubscription(context.Background(), "t", snsName(hook.URL)); sub.Disabled {
		t.Fatal("the visit did not confirm the subscription")
	}
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader("Action=Unsubscribe&SubscriptionArn=arn:aws:sns:default::t:"+snsName(hook.URL)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "192.0.2.7:5000"
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusForbidden {
		t.Fatalf("remote Unsubscribe without tokens: %d %s", w.Code, w.Body)
	}
}

// A broker's subscription needs no confirmation; Protocol names its
// scheme.
func TestSubscribeBrokers(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	mustCall(t, h, "Action", "CreateTopic", "Name", "t")
	const topicARN = "arn:aws:sns:default::t"
	for _, tc := range []struct{ protocol, endpoint string }{
		{"kafka", "kafka://localhost:9092"},
		{"nats", "nats://localhost:4222"},
		{"amqp", "amqps://localhost/vhost"},
	} {
		params := []string{"Action", "Subscribe", "TopicArn", topicARN, "Protocol", tc.protocol, "Endpoint", tc.endpoint,
			"Attributes.entry.1.key", "RawMessageDelivery", "Attributes.entry.1.value", "true"}
		if tc.protocol == "amqp" {
			params = append(params, "Attributes.entry.2.key", "amqp-exchange", "Attributes.entry.2.value", "ex")
		}
		arn := subscriptionArnOf(t, mustCall(t, h, params...))
		if arn != topicARN+":"+snsName(tc.endpoint) {
			t.Errorf("%s: SubscriptionArn %q", tc.endpoint, arn)
		}
		attrs := subscriptionAttributes(t, h, arn)
		if attrs["PendingConfirmation"] != "false" || attrs["RawMessageDelivery"] != "true" || attrs["Protocol"] != strings.Split(tc.endpoint, ":")[0] {
			t.Errorf("%s: %v", tc.endpoint, attrs)
		}
	}
	body := mustCall(t, h, "Action", "ListSubscriptions")
	if strings.Count(body, "<member>") != 3 || !strings.Contains(body, "<Protocol>kafka</Protocol><Endpoint>kafka://localhost:9092</Endpoint>") {
		t.Errorf("ListSubscriptions: %s", body)
	}
}

func TestSubscribeErrors(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	mustCall(t, h, "Action", "CreateTopic", "Name", "t")
	const topicARN = "arn:aws:sns:default::t"
	sub := func(protocol, endpoint string, attrs ...string) []string {
		p := []string{"Action", "Subscribe", "TopicArn", topicARN, "Protocol", protocol, "Endpoint", endpoint}
		for i := 0; i+1 < len(attrs); i += 2 {
			p = append(p, fmt.Sprintf("Attributes.entry.%d.key", i/2+1), attrs[i], fmt.Sprintf("Attributes.entry.%d.value", i/2+1), attrs[i+1])
		}
		return p
	}
	fails(t, h, 400, codeInvalidParameter, `Protocol "sqs"`, sub("sqs", "arn:aws:sqs:us-east-1:1:q")...)
	fails(t, h, 400, codeInvalidParameter, "does not match", sub("https", "http://127.0.0.1:1/")...)
	fails(t, h, 400, codeInvalidParameter, "does not match", sub("kafka", "nats://localhost")...)
	fails(t, h, 400, codeInvalidParameter, `key "price"`, sub("kafka", "kafka://localhost", "FilterPolicy", `{"price": [{"numeric": ["~", 3]}]}`)...)
	fails(t, h, 400, codeInvalidParameter, "RedrivePolicy", sub("kafka", "kafka://localhost", "RedrivePolicy", "{}")...)
	fails(t, h, 400, codeInvalidParameter, "is its Endpoint", sub("kafka", "kafka://localhost", "push_endpoint", "kafka://other")...)
	fails(t, h, 400, codeInvalidParameter, "is its Endpoint", sub("kafka", "kafka://localhost", "Push-Endpoint", "kafka://other")...)
	fails(t, h, 400, codeInvalidParameter, "missing required parameter Endpoint", "Action", "Subscribe", "TopicArn", topicARN, "Protocol", "http")
	fails(t, h, 404, codeNotFound, "nope", "Action", "Subscribe", "TopicArn", "arn:aws:sns:default::nope", "Protocol", "kafka", "Endpoint", "kafka://localhost")
	fails(t, h, 400, codeInvalidParameter, "invalid subscription ARN", "Action", "Unsubscribe", "SubscriptionArn", "pending confirmation")
	fails(t, h, 400, codeInvalidParameter, `zonegroup "zg2"`, "Action", "Unsubscribe", "SubscriptionArn", "arn:aws:sns:zg2::t:sns-1")
	fails(t, h, 404, codeNotFound, "sns-1", "Action", "Unsubscribe", "SubscriptionArn", "arn:aws:sns:default::t:sns-1")
	fails(t, h, 404, codeNotFound, "nope", "Action", "ListSubscriptionsByTopic", "TopicArn", "arn:aws:sns:default::nope")
	if subs, _ := n.ListSubscriptions(context.Background(), "t"); len(subs) != 1 {
		t.Fatalf("refused Subscribes made subscriptions: %+v", subs)
	}

	// herald's limit of subscriptions a topic: SNS's code.
	for i := range 100 {
		mustCall(t, h, sub("kafka", fmt.Sprintf("kafka://localhost:%d", 9000+i))...)
	}
	fails(t, h, 403, codeSubscriptionLimit, "subscriptions", sub("kafka", "kafka://localhost:1")...)
}

func TestListSubscriptionsPages(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	var want []string
	for _, topicName := range []string{"a", "b"} {
		if _, err := n.CreateTopic(context.Background(), topicName, map[string]string{"shards": "1"}); err != nil {
			t.Fatal(err)
		}
		for i := range 80 {
			if _, err := n.CreateSubscription(context.Background(), topicName, fmt.Sprintf("s%03d", i), nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, fmt.Sprintf("arn:aws:sns:default::%s:s%03d", topicName, i))
		}
	}
	list := func(params ...string) ([]string, string) {
		body := mustCall(t, h, params...)
		next := elements(body, "NextToken")
		if len(next) == 0 {
			return elements(body, "SubscriptionArn"), ""
		}
		return elements(body, "SubscriptionArn"), next[0]
	}
	var got []string
	token := ""
	for pages := 0; pages == 0 || token != ""; pages++ {
		if pages == 3 {
			t.Fatal("ListSubscriptions did not end after 2 pages")
		}
		var page []string
		page, token = list("Action", "ListSubscriptions", "NextToken", token)
		if token != "" && len(page) != perPage {
			t.Fatalf("a page of %d subscriptions, and a NextToken", len(page))
		}
		got = append(got, page...)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ListSubscriptions listed %d subscriptions, want the %d once each, in order:\n%v", len(got), len(want), got)
	}
	byTopic, token := list("Action", "ListSubscriptionsByTopic", "TopicArn", "arn:aws:sns:default::b")
	if len(byTopic) != 80 || token != "" || byTopic[0] != "arn:aws:sns:default::b:s000" {
		t.Fatalf("ListSubscriptionsByTopic: %d, %q", len(byTopic), token)
	}
	fails(t, h, 400, codeInvalidParameter, "previous ListSubscriptions response", "Action", "ListSubscriptions", "NextToken", "!")
}

func TestConfirmStates(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	ctx := context.Background()
	mustCall(t, h, "Action", "CreateTopic", "Name", "t")
	const topicARN = "arn:aws:sns:default::t"
	confirm := func(name string) []string {
		return []string{"Action", "ConfirmSubscription", "TopicArn", topicARN, "Token", name + ".00"}
	}
	// As a node that has not applied the disable after Subscribe's
	// creation sees the subscription: enabled, never changed.
	if _, err := n.CreateSubscription(ctx, "t", "sns-lagging", map[string]string{"push_endpoint": "http://127.0.0.1:1/", "message_format": "sns"}); err != nil {
		t.Fatal(err)
	}
	fails(t, h, 503, codeServiceUnavailable, "retry", confirm("sns-lagging")...)

	// Disabled for another reason than its confirmation: not for
	// ConfirmSubscription to enable.
	if _, err := n.DisableSubscription(ctx, "t", "sns-lagging", "the operator said so"); err != nil {
		t.Fatal(err)
	}
	fails(t, h, 400, codeInvalidParameter, "the operator said so", confirm("sns-lagging")...)
	if sub, _ := n.GetSubscription(ctx, "t", "sns-lagging"); !sub.Disabled {
		t.Fatal("ConfirmSubscription enabled a subscription an operator disabled")
	}
	fails(t, h, 404, codeNotFound, "nope", "Action", "ConfirmSubscription", "TopicArn", "arn:aws:sns:default::nope", "Token", "sns-lagging.00")
	fails(t, h, 400, codeInvalidParameter, "Invalid token", confirm("sns-gone")...)
}

// Subscribing an endpoint that has not confirmed sends a new confirmation,
// whose token alone confirms it.
func TestSubscribeAgainWhilePending(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	mustCall(t, h, "Action", "CreateTopic", "Name", "t")
	hook, confirmations := receiver(t, http.StatusOK)
	subscribe := []string{"Action", "Subscribe", "TopicArn", "arn:aws:sns:default::t", "Protocol", "http", "Endpoint", hook.URL}
	mustCall(t, h, subscribe...)
	first := <-confirmations
	if arn := subscriptionArnOf(t, mustCall(t, h, append(subscribe, "ReturnSubscriptionArn", "true")...)); arn != "arn:aws:sns:default::t:"+snsName(hook.URL) {
		t.Fatalf("Subscribe again with ReturnSubscriptionArn: %q", arn)
	}
	second := <-confirmations
	if first.doc.Token == second.doc.Token {
		t.Fatal("the second confirmation has the first's token")
	}
	fails(t, h, 400, codeInvalidParameter, "Invalid token", "Action", "ConfirmSubscription", "TopicArn", "arn:aws:sns:default::t", "Token", first.doc.Token)
	mustCall(t, h, "Action", "ConfirmSubscription", "TopicArn", "arn:aws:sns:default::t", "Token", second.doc.Token)
	if sub, err := n.GetSubscription(context.Background(), "t", snsName(hook.URL)); err != nil || sub.Disabled {
		t.Fatalf("after the second token: %+v (%v)", sub, err)
	}
}
