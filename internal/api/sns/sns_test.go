package sns

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"herald/internal/endpoint"
	"herald/internal/node"
)

func openNode(t *testing.T, maxPayload int) *node.Node {
	t.Helper()
	n, err := node.Open(context.Background(), node.Config{
		DataDir: t.TempDir(), MaxPayloadBytes: maxPayload,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		PushGuard: endpoint.GuardConfig{Allow: []string{"127.0.0.0/8", "::1/128", "localhost"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// call posts a form to h from a loopback address and returns the status
// and body.
func call(t *testing.T, h http.Handler, params ...string) (int, string) {
	t.Helper()
	form := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		form.Add(params[i], params[i+1])
	}
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "127.0.0.1:40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Body.String()
}

func mustCall(t *testing.T, h http.Handler, params ...string) string {
	t.Helper()
	status, body := call(t, h, params...)
	if status != http.StatusOK {
		t.Fatalf("%v: %d %s", params, status, body)
	}
	return body
}

// attributes decodes a GetTopicAttributes response.
func attributes(t *testing.T, body string) map[string]string {
	t.Helper()
	var resp struct {
		Result struct {
			Attributes attributeMap
		} `xml:"GetTopicAttributesResult"`
		RequestID string `xml:"ResponseMetadata>RequestId"`
	}
	if err := xml.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if resp.RequestID == "" {
		t.Fatalf("no RequestId in %s", body)
	}
	m := map[string]string{}
	for _, e := range resp.Result.Attributes.Entries {
		m[e.Key] = e.Value
	}
	return m
}

func TestTopicLifecycleWithCephAttributes(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{Zonegroup: "zg1"})
	const arn = "arn:aws:sns:zg1::fish"

	body := mustCall(t, h, "Action", "CreateTopic", "Name", "fish",
		"Attributes.entry.1.key", "push-endpoint", "Attributes.entry.1.value", "kafka://localhost",
		"Attributes.entry.2.key", "persistent", "Attributes.entry.2.value", "true",
		"Attributes.entry.3.key", "OpaqueData", "Attributes.entry.3.value", "od",
		"Attributes.entry.4.key", "verify-ssl", "Attributes.entry.4.value", "true",
		"Attributes.entry.5.key", "kafka-ack-level", "Attributes.entry.5.value", "broker",
		"Attributes.entry.6.key", "shards", "Attributes.entry.6.value", "3")
	if !strings.Contains(body, "<TopicArn>"+arn+"</TopicArn>") || !strings.Contains(body, `xmlns="`+namespace+`"`) {
		t.Fatalf("CreateTopic: %s", body)
	}
	got := attributes(t, mustCall(t, h, "Action", "GetTopicAttributes", "TopicArn", arn))
	for k, want := range map[string]string{
		"TopicArn": arn, "Name": "fish", "push-endpoint": "kafka://localhost", "persistent": "true",
		"OpaqueData": "od", "tls_insecure_skip_verify": "false", "kafka_acks": "all", "shards": "3",
	} {
		if got[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, got[k], want)
		}
	}

	// Creating it again with new attributes updates it, as in Ceph.
	mustCall(t, h, "Action", "CreateTopic", "Name", "fish", "Attributes.entry.1.key", "max_retries", "Attributes.entry.1.value", "7")
	mustCall(t, h, "Action", "SetTopicAttributes", "TopicArn", arn, "AttributeName", "OpaqueData", "AttributeValue", "od2")
	tp, err := n.GetTopic("fish")
	if err != nil {
		t.Fatal(err)
	}
	if tp.Attributes["max_retries"] != "7" || tp.Attributes["opaque_data"] != "od2" || tp.Attributes["shards"] != "3" {
		t.Fatalf("attributes after updates: %v", tp.Attributes)
	}

	if body := mustCall(t, h, "Action", "ListTopics"); !strings.Contains(body, "<member><TopicArn>"+arn+"</TopicArn></member>") {
		t.Fatalf("ListTopics: %s", body)
	}
	if body := mustCall(t, h, "Action", "GetTopic", "TopicArn", arn); !strings.Contains(body, "<EndpointAddress>kafka://localhost</EndpointAddress>") ||
		!strings.Contains(body, "<OpaqueData>od2</OpaqueData>") {
		t.Fatalf("GetTopic: %s", body)
	}

	// Publish: the group id is the key, the dedup id makes it idempotent.
	pub := func() string {
		body := mustCall(t, h, "Action", "Publish", "TopicArn", arn, "Message", `{"a":1}`,
			"MessageGroupId", "k", "MessageDeduplicationId", "d1", "Subject", "s",
			"MessageAttributes.entry.1.Name", "color", "MessageAttributes.entry.1.Value.DataType", "String",
			"MessageAttributes.entry.1.Value.StringValue", "red")
		var resp struct {
			ID string `xml:"PublishResult>MessageId"`
		}
		if err := xml.Unmarshal([]byte(body), &resp); err != nil || resp.ID == "" {
			t.Fatalf("Publish: %s (%v)", body, err)
		}
		return resp.ID
	}
	if a, b := pub(), pub(); a != b {
		t.Fatalf("a repeated publish with the same MessageDeduplicationId got ids %s and %s", a, b)
	}
	st, err := n.TopicStats(context.Background(), "fish")
	if err != nil || st.Total.Stats.Published != 1 {
		t.Fatalf("published %d events (%v), want 1", st.Total.Stats.Published, err)
	}

	mustCall(t, h, "Action", "DeleteTopic", "TopicArn", arn)
	mustCall(t, h, "Action", "DeleteTopic", "TopicArn", arn) // idempotent
	if len(n.ListTopics()) != 0 {
		t.Fatalf("topics left after DeleteTopic: %v", n.ListTopics())
	}
}

func TestBadRequestsAreSNSErrorsAndChangeNothing(t *testing.T) {
	n := openNode(t, 100)
	h := New(n, Config{})
	mustCall(t, h, "Action", "CreateTopic", "Name", "t", "Attributes.entry.1.key", "OpaqueData", "Attributes.entry.1.value", "before")
	const arn = "arn:aws:sns:default::t"
	tests := []struct {
		name   string
		params []string
		status int
		code   string
		says   string
	}{
		{"unknown action", []string{"Action", "AddPermission"}, 400, codeInvalidAction, "unknown Action"},
		{"no action", nil, 400, codeInvalidAction, "unknown Action"},
		{"missing name", []string{"Action", "CreateTopic"}, 400, codeInvalidParameter, "missing required parameter Name"},
		{"bad topic name", []string{"Action", "CreateTopic", "Name", "a/b"}, 400, codeInvalidParameter, "topic name"},
		{"malformed attribute entry", []string{"Action", "CreateTopic", "Name", "u", "Attributes.entry.x.key", "persistent"}, 400, codeInvalidParameter, "not a positive integer"},
		{"attribute without value", []string{"Action", "CreateTopic", "Name", "u", "Attributes.entry.1.key", "persistent"}, 400, codeInvalidParameter, "has no value"},
		{"unknown attribute", []string{"Action", "CreateTopic", "Name", "u", "Attributes.entry.1.key", "colour", "Attributes.entry.1.value", "red"}, 400, codeInvalidParameter, "colour"},
		{"bad attribute value", []string{"Action", "CreateTopic", "Name", "t", "Attributes.entry.1.key", "verify-ssl", "Attributes.entry.1.value", "maybe"}, 400, codeInvalidParameter, "verify-ssl"},
		{"shards changed", []string{"Action", "CreateTopic", "Name", "t", "Attributes.entry.1.key", "shards", "Attributes.entry.1.value", "5"}, 400, codeInvalidParameter, "shard"},
		{"set unknown attribute", []string{"Action", "SetTopicAttributes", "TopicArn", arn, "AttributeName", "colour", "AttributeValue", "x"}, 400, codeInvalidParameter, "colour"},
		{"other zonegroup", []string{"Action", "GetTopicAttributes", "TopicArn", "arn:aws:sns:zg2::t"}, 400, codeInvalidParameter, `zonegroup "zg2"`},
		{"other zonegroup set", []string{"Action", "SetTopicAttributes", "TopicArn", "arn:aws:sns:zg2::t", "AttributeName", "OpaqueData", "AttributeValue", "x"}, 400, codeInvalidParameter, `zonegroup "zg2"`},
		{"tenant", []string{"Action", "DeleteTopic", "TopicArn", "arn:aws:sns:default:acme:t"}, 400, codeInvalidParameter, "no tenants"},
		{"not an ARN", []string{"Action", "DeleteTopic", "TopicArn", "t"}, 400, codeInvalidParameter, "invalid topic ARN"},
		{"missing ARN", []string{"Action", "Publish", "Message", "m"}, 400, codeInvalidParameter, "missing required parameter TopicArn"},
		{"unknown topic", []string{"Action", "GetTopicAttributes", "TopicArn", "arn:aws:sns:default::nope"}, 404, codeNotFound, "nope"},
		{"publish to unknown topic", []string{"Action", "Publish", "TopicArn", "arn:aws:sns:default::nope", "Message", "m"}, 404, codeNotFound, "nope"},
		{"empty message", []string{"Action", "Publish", "TopicArn", arn, "Message", ""}, 400, codeInvalidParameter, "Message"},
		{"oversized message", []string{"Action", "Publish", "TopicArn", arn, "Message", strings.Repeat("x", 101)}, 400, codeInvalidParameter, "over the limit of 100 bytes"},
		{"message attribute without value", []string{"Action", "Publish", "TopicArn", arn, "Message", "m", "MessageAttributes.entry.1.Name", "c"}, 400, codeInvalidParameter, "message attribute c"},
	}
	for _, tt := range tests {
		status, body := call(t, h, tt.params...)
		var resp errorResponse
		if err := xml.Unmarshal([]byte(body), &resp); err != nil {
			t.Errorf("%s: %d %s: %v", tt.name, status, body, err)
			continue
		}
		if status != tt.status || resp.Error.Code != tt.code || !strings.Contains(resp.Error.Message, tt.says) || resp.RequestID == "" {
			t.Errorf("%s: %d %s, want %d %s saying %q", tt.name, status, body, tt.status, tt.code, tt.says)
		}
	}
	// Nothing changed.
	topics := n.ListTopics()
	if len(topics) != 1 || topics[0].Attributes["opaque_data"] != "before" || topics[0].Attributes["tls_insecure_skip_verify"] != "false" {
		t.Fatalf("rejected requests changed the topics: %v", topics)
	}
	st, err := n.TopicStats(context.Background(), "t")
	if err != nil || st.Total.Stats.Published != 0 {
		t.Fatalf("rejected publishes appended %d events (%v)", st.Total.Stats.Published, err)
	}
}

func TestCephValuesTranslate(t *testing.T) {
	for _, tt := range []struct{ name, value, hname, hvalue string }{
		{"verify-ssl", "false", "tls_insecure_skip_verify", "true"},
		{"verify-ssl", "true", "tls_insecure_skip_verify", "false"},
		{"kafka-ack-level", "broker", "kafka_acks", "all"},
		{"kafka-ack-level", "none", "kafka_acks", "none"},
		{"OpaqueData", "x", "opaque_data", "x"},
		{"ca-location", "ca.pem", "tls_ca_file", "ca.pem"},
		{"max-queue-bytes", "5", "max-queue-bytes", "5"}, // herald's own, passed on
	} {
		hname, hvalue, err := toHerald(tt.name, tt.value)
		if err != nil || hname != tt.hname || hvalue != tt.hvalue {
			t.Errorf("%s=%s: %s=%s (%v), want %s=%s", tt.name, tt.value, hname, hvalue, err, tt.hname, tt.hvalue)
		}
	}
	if _, _, err := toHerald("kafka-ack-level", "routable"); err == nil {
		t.Error("kafka-ack-level=routable accepted")
	}
}

func TestRemoteCallersNeedTokens(t *testing.T) {
	n := openNode(t, 0)
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("Action=CreateTopic&Name=t"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "192.0.2.7:5000" // not a connection: only the address is looked at
	w := httptest.NewRecorder()
	New(n, Config{}).ServeHTTP(w, req)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "<Code>AuthorizationError</Code>") {
		t.Fatalf("remote request without tokens: %d %s, want 403 AuthorizationError", w.Code, w.Body)
	}
	if len(n.ListTopics()) != 0 {
		t.Fatal("a refused request created a topic")
	}
	// With a token check in front (AllowRemote), the same request passes.
	req = httptest.NewRequest(http.MethodPost, "/", strings.NewReader("Action=CreateTopic&Name=t"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "192.0.2.7:5000"
	w = httptest.NewRecorder()
	New(n, Config{AllowRemote: true}).ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("remote request with AllowRemote: %d %s", w.Code, w.Body)
	}
}

// createTopics creates topics named prefix000, prefix001, ... directly on
// the node, with one shard each to keep them cheap.
func createTopics(t *testing.T, n *node.Node, prefix string, count int) []string {
	t.Helper()
	var names []string
	for i := range count {
		name := fmt.Sprintf("%s%03d", prefix, i)
		if _, err := n.CreateTopic(context.Background(), name, map[string]string{"shards": "1"}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}

// listPage calls ListTopics and returns the page's topic names and its
// NextToken.
func listPage(t *testing.T, h http.Handler, token string) ([]string, string) {
	t.Helper()
	params := []string{"Action", "ListTopics"}
	if token != "" {
		params = append(params, "NextToken", token)
	}
	var resp struct {
		ARNs      []string `xml:"ListTopicsResult>Topics>member>TopicArn"`
		NextToken *string  `xml:"ListTopicsResult>NextToken"`
	}
	body := mustCall(t, h, params...)
	if err := xml.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("ListTopics: %s: %v", body, err)
	}
	var names []string
	for _, arn := range resp.ARNs {
		names = append(names, strings.TrimPrefix(arn, "arn:aws:sns:default::"))
	}
	if resp.NextToken == nil {
		return names, ""
	}
	if *resp.NextToken == "" {
		t.Fatalf("ListTopics answered an empty NextToken: %s", body)
	}
	return names, *resp.NextToken
}

func TestListTopicsPagesByName(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	want := createTopics(t, n, "t", 2*perPage+50)

	first, token := listPage(t, h, "")
	if len(first) != perPage || token == "" {
		t.Fatalf("first page: %d topics, NextToken %q; want %d and a token", len(first), token, perPage)
	}
	// Between pages, a topic sorting before the page's end appears in
	// no later page, and deleting the last topic listed moves nothing.
	if _, err := n.CreateTopic(context.Background(), "a-new", map[string]string{"shards": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteTopic(context.Background(), first[len(first)-1]); err != nil {
		t.Fatal(err)
	}
	got := first
	for pages := 1; token != ""; pages++ {
		if pages > 3 {
			t.Fatal("ListTopics did not end after 3 pages")
		}
		var page []string
		page, token = listPage(t, h, token)
		got = append(got, page...)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the pages listed %d topics:\n%v\nwant each of the %d once, in order", len(got), got, len(want))
	}

	// Exactly a page of topics: one page, no NextToken.
	for _, name := range want[perPage:] {
		if err := n.DeleteTopic(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	if page, token := listPage(t, h, ""); len(page) != perPage || token != "" {
		t.Fatalf("%d topics: a page of %d with NextToken %q, want all and no token", len(n.ListTopics()), len(page), token)
	}
}

func TestListTopicsRefusesForeignTokens(t *testing.T) {
	h := New(openNode(t, 0), Config{})
	for _, token := range []string{"not base64!", "="} {
		status, body := call(t, h, "Action", "ListTopics", "NextToken", token)
		if status != http.StatusBadRequest || !strings.Contains(body, "<Code>InvalidParameter</Code>") || !strings.Contains(body, "previous ListTopics response") {
			t.Errorf("NextToken %q: %d %s, want 400 InvalidParameter", token, status, body)
		}
	}
}

func TestGetTopicAttributesAnswersAsCeph(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{Zonegroup: "zg1"})
	mustCall(t, h, "Action", "CreateTopic", "Name", "fish",
		"Attributes.entry.1.key", "push-endpoint", "Attributes.entry.1.value", "amqp://user:hunter2@localhost:5672/vhost?token=t0p",
		"Attributes.entry.2.key", "persistent", "Attributes.entry.2.value", "true",
		"Attributes.entry.3.key", "OpaqueData", "Attributes.entry.3.value", "od",
		"Attributes.entry.4.key", "amqp-exchange", "Attributes.entry.4.value", "ex")
	got := attributes(t, mustCall(t, h, "Action", "GetTopicAttributes", "TopicArn", "arn:aws:sns:zg1::fish"))
	if strings.Contains(fmt.Sprint(got), "hunter2") || strings.Contains(fmt.Sprint(got), "t0p") {
		t.Fatalf("GetTopicAttributes shows the endpoint's secrets: %v", got)
	}
	for k, want := range map[string]string{
		"User": "", "Name": "fish", "TopicArn": "arn:aws:sns:zg1::fish", "OpaqueData": "od",
		"persistent": "true", "amqp-exchange": "ex", "shards": "11", // herald's own stay
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("attribute %s = %q (present %v), want %q", k, v, ok, want)
		}
	}
	var ep cephEndpoint
	if err := json.Unmarshal([]byte(got["EndPoint"]), &ep); err != nil {
		t.Fatalf("EndPoint %q is not JSON: %v", got["EndPoint"], err)
	}
	args, err := url.ParseQuery(ep.EndpointArgs)
	if err != nil {
		t.Fatalf("EndpointArgs %q: %v", ep.EndpointArgs, err)
	}
	if ep.EndpointAddress != "amqp://user:xxxxx@localhost:5672/vhost?token=xxxxx" || ep.EndpointTopic != "fish" ||
		!ep.HasStoredSecret || !ep.Persistent || args.Get("amqp-exchange") != "ex" || args.Get("push-endpoint") != ep.EndpointAddress {
		t.Fatalf("EndPoint %s", got["EndPoint"])
	}
	// GetTopic answers the same endpoint.
	var topic struct {
		EndPoint cephEndpoint `xml:"GetTopicResult>Topic>EndPoint"`
	}
	if err := xml.Unmarshal([]byte(mustCall(t, h, "Action", "GetTopic", "TopicArn", "arn:aws:sns:zg1::fish")), &topic); err != nil || topic.EndPoint != ep {
		t.Fatalf("GetTopic's EndPoint %+v (%v), want %+v", topic.EndPoint, err, ep)
	}
}

func TestHasStoredSecret(t *testing.T) {
	for _, tt := range []struct {
		attrs map[string]string
		want  bool
	}{
		{map[string]string{}, false},
		{map[string]string{"push_endpoint": "https://hooks.example/x?sig=xxxxx"}, false},
		{map[string]string{"push_endpoint": "nats://xxxxx@localhost"}, true},
		{map[string]string{"push_endpoint": "https://hooks.example/x", "signing_secret": "(set)"}, true},
		{map[string]string{"push_endpoint": "kafka://xxxxx@host:%zz"}, true}, // does not parse
	} {
		c := (&Handler{}).cephTopicOf(node.Topic{Name: "t", Attributes: tt.attrs})
		if c.EndPoint.HasStoredSecret != tt.want {
			t.Errorf("%v: HasStoredSecret %v, want %v", tt.attrs, c.EndPoint.HasStoredSecret, tt.want)
		}
	}
}

// batchParams returns the parameters of a PublishBatch to arn, each entry
// given as field-value pairs.
func batchParams(arn string, entries ...[]string) []string {
	params := []string{"Action", "PublishBatch", "TopicArn", arn}
	for i, fields := range entries {
		for j := 0; j+1 < len(fields); j += 2 {
			params = append(params, fmt.Sprintf("%s%d.%s", batchEntriesParam, i+1, fields[j]), fields[j+1])
		}
	}
	return params
}

func TestPublishBatchAnswersEachEntry(t *testing.T) {
	n := openNode(t, 100)
	h := New(n, Config{})
	if _, err := n.CreateTopic(context.Background(), "t", map[string]string{"persistent": "true", "shards": "1"}); err != nil {
		t.Fatal(err)
	}
	body := mustCall(t, h, batchParams("arn:aws:sns:default::t",
		[]string{"Id", "a", "Message", "m1", "MessageGroupId", "k", "Subject", "s",
			"MessageAttributes.entry.1.Name", "color", "MessageAttributes.entry.1.Value.DataType", "String",
			"MessageAttributes.entry.1.Value.StringValue", "red"},
		[]string{"Id", "too-big", "Message", strings.Repeat("x", 101)},
		[]string{"Id", "no_message"},
		[]string{"Id", "d", "Message", "m2", "MessageGroupId", "k", "MessageDeduplicationId", "d1"},
		[]string{"Id", "again", "Message", "m2", "MessageGroupId", "k", "MessageDeduplicationId", "d1"},
	)...)
	var resp struct {
		Result publishBatchResult `xml:"PublishBatchResult"`
	}
	if err := xml.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("PublishBatch: %s: %v", body, err)
	}
	ok, failed := resp.Result.Successful.Members, resp.Result.Failed.Members
	if len(ok) != 3 || ok[0].ID != "a" || ok[1].ID != "d" || ok[2].ID != "again" || ok[1].MessageID != ok[2].MessageID {
		t.Fatalf("Successful: %+v; want a, d and again, the last two with one MessageId", ok)
	}
	if len(failed) != 2 || failed[0].ID != "too-big" || failed[1].ID != "no_message" ||
		failed[0].Code != codeInvalidParameter || !strings.Contains(failed[0].Message, "over the limit of 100 bytes") || !failed[0].SenderFault ||
		failed[1].Code != codeInvalidParameter || !strings.Contains(failed[1].Message, "Message") || !failed[1].SenderFault {
		t.Fatalf("Failed: %+v", failed)
	}
	if st, err := n.TopicStats(context.Background(), "t"); err != nil || st.Total.Stats.Published != 2 {
		t.Fatalf("published %d events (%v), want 2", st.Total.Stats.Published, err)
	}
	// The events share a key, so a fetch hands them out in order.
	got, err := n.Fetch(context.Background(), "t", node.FetchOptions{Max: 10})
	if err != nil || len(got.Deliveries) != 2 {
		t.Fatalf("fetched %d events (%v), want 2", len(got.Deliveries), err)
	}
	first := got.Deliveries[0]
	if first.ID != ok[0].MessageID || first.Event.Key != "k" || string(first.Event.Payload) != "m1" ||
		first.Event.Headers["color"] != "red" || first.Event.Headers["Subject"] != "s" {
		t.Fatalf("the first entry's event: %+v, id %s", first.Event, first.ID)
	}
}

func TestPublishBatchLimits(t *testing.T) {
	n := openNode(t, 0)
	h := New(n, Config{})
	const arn = "arn:aws:sns:default::t"
	if _, err := n.CreateTopic(context.Background(), "t", map[string]string{"persistent": "true"}); err != nil {
		t.Fatal(err)
	}
	entry := func(id string) []string { return []string{"Id", id, "Message", "m"} }
	var eleven [][]string
	for i := range 11 {
		eleven = append(eleven, entry(fmt.Sprint("e", i)))
	}
	var tooLong [][]string
	for i := range 5 {
		tooLong = append(tooLong, []string{"Id", fmt.Sprint("e", i), "Message", strings.Repeat("x", MaxBatchBytes/5+1)})
	}
	for _, tt := range []struct {
		name   string
		params []string
		code   string
		says   string
	}{
		{"no entries", batchParams(arn), codeEmptyBatch, "no entries"},
		{"eleven entries", batchParams(arn, eleven...), codeTooManyEntries, "11 entries, over the limit of 10"},
		{"id with a space", batchParams(arn, entry("a b")), codeInvalidBatchEntryID, `"a b"`},
		{"no id", batchParams(arn, []string{"Message", "m"}), codeInvalidBatchEntryID, `Id ""`},
		{"long id", batchParams(arn, entry(strings.Repeat("i", 81))), codeInvalidBatchEntryID, "1 to 80"},
		{"ids not distinct", batchParams(arn, entry("a"), entry("b"), entry("a")), codeBatchIDsNotDistinct, `Id "a"`},
		{"too long", batchParams(arn, tooLong...), codeBatchTooLong, "over the limit of 4194304"},
		{"malformed entry", append(batchParams(arn, entry("a")), batchEntriesParam+"x.Id", "b"), codeInvalidParameter, batchEntriesParam + "x.Id"},
		{"unknown topic", batchParams("arn:aws:sns:default::nope", entry("a")), codeNotFound, "nope"},
		{"no topic", batchParams("", entry("a")), codeInvalidParameter, "TopicArn"},
	} {
		status, body := call(t, h, tt.params...)
		var resp errorResponse
		if err := xml.Unmarshal([]byte(body), &resp); err != nil || status/100 != 4 ||
			resp.Error.Code != tt.code || !strings.Contains(resp.Error.Message, tt.says) {
			t.Errorf("%s: %d %.300s (%v), want %s saying %q", tt.name, status, body, err, tt.code, tt.says)
		}
	}
	if st, err := n.TopicStats(context.Background(), "t"); err != nil || st.Total.Stats.Published != 0 {
		t.Fatalf("refused batches published %d events (%v)", st.Total.Stats.Published, err)
	}
}
