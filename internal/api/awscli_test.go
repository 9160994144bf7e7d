package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/endpoint"
	"herald/internal/node"
)

// These tests drive the SNS-style API with the real aws CLI and boto3,
// which scripts/install-test-deps.sh installs from PyPI into a virtual
// environment: $HERALD_AWS_VENV, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/herald-test/venv.

func awsVenv(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the AWS CLI or boto3 (Python processes); the fast tier (-short) starts no external program")
	}
	dir := os.Getenv("HERALD_AWS_VENV")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "herald-test", "venv")
	}
	if _, err := os.Stat(filepath.Join(dir, "bin", "aws")); err != nil {
		t.Fatalf("the aws CLI is not installed in %s (%v); run scripts/install-test-deps.sh, or point $HERALD_AWS_VENV at a virtual environment with awscli and boto3", dir, err)
	}
	return dir
}

// awsEnv is the environment of the aws CLI and boto3: dummy credentials
// and a region, and no configuration from the machine.
func awsEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"AWS_ACCESS_KEY_ID=herald-test", "AWS_SECRET_ACCESS_KEY=herald-test",
		"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true",
		"AWS_PAGER=", "AWS_MAX_ATTEMPTS=1",
	}
}

// startSNSServer starts a node with its whole API on a loopback port. Its
// push endpoints may point at loopback addresses.
func startSNSServer(t *testing.T, maxPayload int) (string, *node.Node) {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := node.Open(context.Background(), node.Config{
		DataDir: t.TempDir(), MaxPayloadBytes: maxPayload, Registerer: reg,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		PushGuard: endpoint.GuardConfig{Allow: []string{"127.0.0.0/8", "::1/128", "localhost"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(n, reg, Options{}))
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return srv.URL, n
}

type awsCLI struct {
	t        *testing.T
	bin, url string
	env      []string
}

// run runs aws --endpoint-url URL sns ARGS and returns its standard
// output, standard error and exit status.
func (a *awsCLI) run(args ...string) (string, string, int) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.bin, append([]string{"--endpoint-url", a.url, "sns"}, args...)...)
	cmd.Env = a.env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		a.t.Fatalf("aws %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// ok runs the CLI, expects success and decodes its JSON output into v.
func (a *awsCLI) ok(v any, args ...string) {
	a.t.Helper()
	out, errOut, code := a.run(args...)
	if code != 0 {
		a.t.Fatalf("aws sns %v: exit %d\n%s", args, code, errOut)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			a.t.Fatalf("aws sns %v: output %q: %v", args, out, err)
		}
	}
}

// fails runs the CLI and expects it to fail saying want.
func (a *awsCLI) fails(want string, args ...string) {
	a.t.Helper()
	_, errOut, code := a.run(args...)
	if code == 0 || !strings.Contains(errOut, want) {
		a.t.Errorf("aws sns %v: exit %d, stderr %q; want a failure saying %q", args, code, errOut, want)
	}
}

func TestAWSCLI(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 1000)
	aws := &awsCLI{t: t, bin: filepath.Join(venv, "bin", "aws"), url: url, env: awsEnv(t)}

	// The seed's command line, with herald's address. Nothing listens
	// for Kafka on localhost: the topic is created, its events wait.
	var created struct{ TopicArn string }
	aws.ok(&created, "create-topic", "--name=fishtopic",
		`--attributes={"push-endpoint": "kafka://localhost", "persistent": "true"}`)
	const arn = "arn:aws:sns:default::fishtopic"
	if created.TopicArn != arn {
		t.Fatalf("create-topic: TopicArn %q, want %q", created.TopicArn, arn)
	}

	var listed struct{ Topics []struct{ TopicArn string } }
	aws.ok(&listed, "list-topics")
	if len(listed.Topics) != 1 || listed.Topics[0].TopicArn != arn {
		t.Fatalf("list-topics: %+v", listed)
	}

	getAttrs := func() map[string]string {
		var got struct{ Attributes map[string]string }
		aws.ok(&got, "get-topic-attributes", "--topic-arn", arn)
		return got.Attributes
	}
	attrs := getAttrs()
	if attrs["push-endpoint"] != "kafka://localhost" || attrs["persistent"] != "true" || attrs["TopicArn"] != arn {
		t.Fatalf("get-topic-attributes: %v", attrs)
	}

	aws.ok(nil, "set-topic-attributes", "--topic-arn", arn, "--attribute-name", "OpaqueData", "--attribute-value", "from-cli")
	if got := getAttrs()["OpaqueData"]; got != "from-cli" {
		t.Fatalf("OpaqueData after set-topic-attributes: %q", got)
	}

	var pub struct{ MessageId string }
	aws.ok(&pub, "publish", "--topic-arn", arn, "--message", "hello", "--message-group-id", "k1", "--message-deduplication-id", "m1")
	if !strings.HasPrefix(pub.MessageId, "fishtopic/") {
		t.Fatalf("publish: MessageId %q", pub.MessageId)
	}
	var again struct{ MessageId string }
	aws.ok(&again, "publish", "--topic-arn", arn, "--message", "hello", "--message-group-id", "k1", "--message-deduplication-id", "m1")
	if again.MessageId != pub.MessageId {
		t.Fatalf("a publish repeated with its deduplication id got %q, want %q", again.MessageId, pub.MessageId)
	}

	// Bad input: a clear SNS error, and nothing changes.
	before := getAttrs()
	aws.fails(`(InvalidParameter) when calling the CreateTopic operation: unknown attribute "colour": use one of persistent, shards, push_endpoint`, "create-topic", "--name=fishtopic", `--attributes={"colour": "red"}`)
	aws.fails("Error parsing parameter '--attributes'", "create-topic", "--name=fishtopic", `--attributes={"persistent": `)
	aws.fails("the following arguments are required: --name", "create-topic")
	aws.fails(`(InvalidParameter) when calling the GetTopicAttributes operation: topic ARN "arn:aws:sns:zg2::fishtopic" names zonegroup "zg2"`,
		"get-topic-attributes", "--topic-arn", "arn:aws:sns:zg2::fishtopic")
	aws.fails(`(InvalidParameter) when calling the SetTopicAttributes operation: topic ARN "arn:aws:sns:zg2::fishtopic" names zonegroup "zg2"`,
		"set-topic-attributes", "--topic-arn", "arn:aws:sns:zg2::fishtopic", "--attribute-name", "OpaqueData", "--attribute-value", "x")
	aws.fails("(InvalidParameter) when calling the Publish operation: payload too large: event 0 has a 1001-byte payload, over the limit of 1000 bytes",
		"publish", "--topic-arn", arn, "--message", strings.Repeat("x", 1001))
	aws.fails("(InvalidAction) when calling the ListPlatformApplications operation: unknown Action \"ListPlatformApplications\"",
		"list-platform-applications")
	aws.fails("(NotFound) when calling the GetTopicAttributes operation", "get-topic-attributes", "--topic-arn", "arn:aws:sns:default::nope")
	if after := getAttrs(); !maps.Equal(before, after) {
		t.Fatalf("rejected requests changed the topic:\n%v\n%v", before, after)
	}
	if st, err := n.TopicStats(context.Background(), "fishtopic"); err != nil || st.Total.Stats.Published != 1 {
		t.Fatalf("published %d events (%v), want 1", st.Total.Stats.Published, err)
	}
	if len(n.ListTopics()) != 1 {
		t.Fatalf("topics after rejected requests: %v", n.ListTopics())
	}

	aws.ok(nil, "delete-topic", "--topic-arn", arn)
	aws.ok(nil, "delete-topic", "--topic-arn", arn) // idempotent
	aws.ok(&listed, "list-topics")
	if len(listed.Topics) != 0 {
		t.Fatalf("list-topics after delete-topic: %+v", listed)
	}
}

// TestAWSCLIWebhookTopicDelivers creates a webhook topic through the SNS
// API and publishes to it with the aws CLI: the webhook receives the
// message.
func TestAWSCLIWebhookTopicDelivers(t *testing.T) {
	venv := awsVenv(t)
	got := make(chan []byte, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case got <- b:
		default:
		}
	}))
	defer hook.Close()
	url, _ := startSNSServer(t, 0)
	aws := &awsCLI{t: t, bin: filepath.Join(venv, "bin", "aws"), url: url, env: awsEnv(t)}
	var created struct{ TopicArn string }
	aws.ok(&created, "create-topic", "--name=hooks",
		`--attributes={"push-endpoint": "`+hook.URL+`/events", "OpaqueData": "od-1"}`)
	aws.ok(nil, "publish", "--topic-arn", created.TopicArn, "--message", `{"order": 7}`, "--message-group-id", "customer-1")
	select {
	case body := <-got:
		var env struct {
			Topic      string          `json:"topic"`
			Key        string          `json:"key"`
			Payload    json.RawMessage `json:"payload"`
			OpaqueData string          `json:"opaque_data"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("webhook body %s: %v", body, err)
		}
		if env.Topic != "hooks" || env.Key != "customer-1" || string(env.Payload) != `{"order":7}` || env.OpaqueData != "od-1" {
			t.Fatalf("webhook received %s", body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook received nothing within 30s")
	}
}

// TestBoto3 runs a boto3 script against the API.
func TestBoto3(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 0)
	script := `
import json, sys
import boto3, botocore.exceptions
sns = boto3.client("sns", endpoint_url=sys.argv[1])
out = {}
arn = sns.create_topic(Name="orders", Attributes={"persistent": "true", "shards": "4", "OpaqueData": "od"})["TopicArn"]
out["arn"] = arn
out["topics"] = [t["TopicArn"] for t in sns.list_topics()["Topics"]]
out["attributes"] = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
sns.set_topic_attributes(TopicArn=arn, AttributeName="max_retries", AttributeValue="3")
out["ids"] = [sns.publish(TopicArn=arn, Message="m%d" % i, MessageGroupId="g%d" % i)["MessageId"] for i in range(3)]
try:
    sns.create_topic(Name="orders", Attributes={"shards": "5"})
except botocore.exceptions.ClientError as e:
    out["error"] = [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]]
sns.delete_topic(TopicArn=arn)
sns.delete_topic(TopicArn=arn)
out["after"] = sns.list_topics()["Topics"]
print(json.dumps(out))
`
	var res struct {
		ARN        string
		Topics     []string
		Attributes map[string]string
		IDs        []string
		Error      []any
		After      []any
	}
	runBoto3(t, venv, script, url, &res)
	if res.ARN != "arn:aws:sns:default::orders" || len(res.Topics) != 1 || res.Topics[0] != res.ARN {
		t.Fatalf("boto3 create/list: %+v", res)
	}
	if res.Attributes["shards"] != "4" || res.Attributes["OpaqueData"] != "od" || res.Attributes["persistent"] != "true" {
		t.Fatalf("boto3 attributes: %v", res.Attributes)
	}
	if len(res.IDs) != 3 || !strings.HasPrefix(res.IDs[0], "orders/") {
		t.Fatalf("boto3 publish ids: %v", res.IDs)
	}
	if len(res.Error) != 2 || res.Error[0] != "InvalidParameter" || res.Error[1] != float64(400) {
		t.Fatalf("boto3 create_topic changing the shards: error %v, want InvalidParameter 400", res.Error)
	}
	if len(res.After) != 0 || len(n.ListTopics()) != 0 {
		t.Fatalf("topics after delete_topic: %v", res.After)
	}
}

// runBoto3 runs a Python script with boto3 at hand, the server's URL its
// argument, and decodes the JSON it prints into v.
func runBoto3(t *testing.T, venv, script, url string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-c", script, url)
	cmd.Env = awsEnv(t)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("boto3 script: %v\n%s", err, stderr)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("boto3 output %s: %v", out, err)
	}
}

// createTopics creates count topics named prefix000, ... on n, with one
// shard each to keep them cheap, and returns their ARNs.
func createTopics(t *testing.T, n *node.Node, prefix string, count int) []string {
	t.Helper()
	var arns []string
	for i := range count {
		name := fmt.Sprintf("%s%03d", prefix, i)
		if _, err := n.CreateTopic(context.Background(), name, map[string]string{"shards": "1"}); err != nil {
			t.Fatal(err)
		}
		arns = append(arns, "arn:aws:sns:default::"+name)
	}
	return arns
}

// TestAWSCLIListsEveryPage lists more topics than a page holds: the aws
// CLI follows NextToken and lists each once.
func TestAWSCLIListsEveryPage(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 0)
	aws := &awsCLI{t: t, bin: filepath.Join(venv, "bin", "aws"), url: url, env: awsEnv(t)}
	want := createTopics(t, n, "page", 230)
	var listed struct{ Topics []struct{ TopicArn string } }
	aws.ok(&listed, "list-topics")
	var got []string
	for _, topic := range listed.Topics {
		got = append(got, topic.TopicArn)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("aws sns list-topics listed %d topics, want the %d once each:\n%v", len(got), len(want), got)
	}
	// One page by hand: the CLI shows the NextToken to pass on.
	var page struct {
		Topics    []struct{ TopicArn string }
		NextToken string
	}
	aws.ok(&page, "list-topics", "--max-items", "100")
	if len(page.Topics) != 100 || page.NextToken == "" {
		t.Fatalf("list-topics --max-items 100: %d topics, NextToken %q", len(page.Topics), page.NextToken)
	}
	aws.fails("(InvalidParameter) when calling the ListTopics operation: NextToken", "list-topics", "--starting-token", "not-a-token!")
}

// TestBoto3PagesAndCephAttributes pages with boto3's paginator and reads
// the attributes Ceph answers with.
func TestBoto3PagesAndCephAttributes(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 0)
	want := createTopics(t, n, "page", 150)
	script := `
import json, sys
import boto3
sns = boto3.client("sns", endpoint_url=sys.argv[1])
out = {"pages": []}
for page in sns.get_paginator("list_topics").paginate():
    out["pages"].append([t["TopicArn"] for t in page["Topics"]])
arn = sns.create_topic(Name="zz-ceph", Attributes={"push-endpoint": "http://u:secret@127.0.0.1:1/hook", "persistent": "true", "OpaqueData": "od"})["TopicArn"]
attrs = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
out["attributes"] = attrs
out["endpoint"] = json.loads(attrs["EndPoint"])
print(json.dumps(out))
`
	var res struct {
		Pages      [][]string
		Attributes map[string]string
		Endpoint   struct {
			EndpointAddress, EndpointArgs, EndpointTopic string
			HasStoredSecret, Persistent                  bool
		}
	}
	runBoto3(t, venv, script, url, &res)
	if len(res.Pages) != 2 || len(res.Pages[0]) != 100 || !slices.Equal(slices.Concat(res.Pages...), want) {
		t.Fatalf("boto3's paginator: pages of %d topics, want 100 and 50 in order", len(slices.Concat(res.Pages...)))
	}
	a, ep := res.Attributes, res.Endpoint
	if a["Name"] != "zz-ceph" || a["TopicArn"] != "arn:aws:sns:default::zz-ceph" || a["OpaqueData"] != "od" || a["User"] != "" || a["persistent"] != "true" {
		t.Fatalf("boto3 attributes: %v", a)
	}
	if ep.EndpointAddress != "http://u:xxxxx@127.0.0.1:1/hook" || ep.EndpointTopic != "zz-ceph" || !ep.HasStoredSecret || !ep.Persistent ||
		!strings.Contains(ep.EndpointArgs, "OpaqueData=od") {
		t.Fatalf("boto3 EndPoint: %+v", ep)
	}
}

// TestAWSCLIPublishBatch publishes a batch with the aws CLI: each entry
// is answered, and batches over SNS's limits get SNS's error codes.
func TestAWSCLIPublishBatch(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 1000)
	aws := &awsCLI{t: t, bin: filepath.Join(venv, "bin", "aws"), url: url, env: awsEnv(t)}
	var created struct{ TopicArn string }
	aws.ok(&created, "create-topic", "--name=batch", `--attributes={"persistent": "true"}`)

	entries := `[{"Id": "a", "Message": "m1", "MessageGroupId": "k1", "MessageDeduplicationId": "d1",
	  "MessageAttributes": {"color": {"DataType": "String", "StringValue": "red"}}},
	 {"Id": "big", "Message": "` + strings.Repeat("x", 1001) + `"},
	 {"Id": "b", "Message": "m2", "MessageGroupId": "k2"}]`
	var res struct {
		Successful []struct{ Id, MessageId string }
		Failed     []struct {
			Id, Code, Message string
			SenderFault       bool
		}
	}
	aws.ok(&res, "publish-batch", "--topic-arn", created.TopicArn, "--publish-batch-request-entries", entries)
	if len(res.Successful) != 2 || res.Successful[0].Id != "a" || res.Successful[1].Id != "b" || !strings.HasPrefix(res.Successful[0].MessageId, "batch/") {
		t.Fatalf("publish-batch Successful: %+v", res.Successful)
	}
	if len(res.Failed) != 1 || res.Failed[0].Id != "big" || res.Failed[0].Code != "InvalidParameter" || !res.Failed[0].SenderFault ||
		!strings.Contains(res.Failed[0].Message, "over the limit of 1000 bytes") {
		t.Fatalf("publish-batch Failed: %+v", res.Failed)
	}

	var eleven []string
	for i := range 11 {
		eleven = append(eleven, fmt.Sprintf(`{"Id": "e%d", "Message": "m"}`, i))
	}
	aws.fails("(TooManyEntriesInBatchRequest) when calling the PublishBatch operation: the batch has 11 entries",
		"publish-batch", "--topic-arn", created.TopicArn, "--publish-batch-request-entries", "["+strings.Join(eleven, ",")+"]")
	aws.fails("(BatchEntryIdsNotDistinct) when calling the PublishBatch operation",
		"publish-batch", "--topic-arn", created.TopicArn, "--publish-batch-request-entries", `[{"Id": "a", "Message": "m"}, {"Id": "a", "Message": "m"}]`)
	aws.fails("(InvalidBatchEntryId) when calling the PublishBatch operation",
		"publish-batch", "--topic-arn", created.TopicArn, "--publish-batch-request-entries", `[{"Id": "a.b", "Message": "m"}]`)
	aws.fails("(NotFound) when calling the PublishBatch operation",
		"publish-batch", "--topic-arn", "arn:aws:sns:default::nope", "--publish-batch-request-entries", `[{"Id": "a", "Message": "m"}]`)
	if st, err := n.TopicStats(context.Background(), "batch"); err != nil || st.Total.Stats.Published != 2 {
		t.Fatalf("published %d events (%v), want 2", st.Total.Stats.Published, err)
	}
}

// TestBoto3PublishBatch publishes a batch with boto3, which maps SNS's
// batch error codes to its exception classes.
func TestBoto3PublishBatch(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 0)
	script := `
import json, sys
import boto3
sns = boto3.client("sns", endpoint_url=sys.argv[1])
arn = sns.create_topic(Name="batch", Attributes={"persistent": "true"})["TopicArn"]
out = sns.publish_batch(TopicArn=arn, PublishBatchRequestEntries=[
    {"Id": "a", "Message": "m1", "MessageGroupId": "k1", "Subject": "s"},
    {"Id": "b", "Message": "m2", "MessageGroupId": "k2",
     "MessageAttributes": {"color": {"DataType": "String", "StringValue": "red"}}},
])
del out["ResponseMetadata"]
out.setdefault("Failed", None)
try:
    sns.publish_batch(TopicArn=arn, PublishBatchRequestEntries=[{"Id": "e%d" % i, "Message": "m"} for i in range(11)])
except sns.exceptions.TooManyEntriesInBatchRequestException as e:
    out["TooMany"] = e.response["Error"]["Code"]
print(json.dumps(out))
`
	var res struct {
		Successful []struct{ Id, MessageId string }
		Failed     []any
		TooMany    string
	}
	runBoto3(t, venv, script, url, &res)
	if len(res.Successful) != 2 || res.Successful[0].Id != "a" || res.Successful[1].Id != "b" || res.Failed == nil || len(res.Failed) != 0 {
		t.Fatalf("boto3 publish_batch: %+v", res)
	}
	if res.TooMany != "TooManyEntriesInBatchRequest" {
		t.Fatalf("boto3 publish_batch of 11 entries: error %q, want TooManyEntriesInBatchRequestException", res.TooMany)
	}
	if st, err := n.TopicStats(context.Background(), "batch"); err != nil || st.Total.Stats.Published != 2 {
		t.Fatalf("published %d events (%v), want 2", st.Total.Stats.Published, err)
	}
}

// snsReceiver starts an HTTP endpoint for SNS subscriptions: it answers
// 200 and passes on the SubscriptionConfirmations it receives.
func snsReceiver(t *testing.T) (*httptest.Server, <-chan map[string]string) {
	t.Helper()
	got := make(chan map[string]string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var raw map[string]any
		if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
			t.Errorf("receiver: %v", err)
		}
		// Fields that are not strings (MessageAttributes) as their JSON.
		doc := make(map[string]string, len(raw)+1)
		for k, v := range raw {
			if s, ok := v.(string); ok {
				doc[k] = s
			} else {
				b, _ := json.Marshal(v)
				doc[k] = string(b)
			}
		}
		doc["header:x-amz-sns-message-type"] = r.Header.Get("x-amz-sns-message-type")
		got <- doc
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// TestAWSCLISubscriptions subscribes an HTTP endpoint with the aws CLI,
// confirms it with the token the endpoint received, and administers it.
func TestAWSCLISubscriptions(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 0)
	aws := &awsCLI{t: t, bin: filepath.Join(venv, "bin", "aws"), url: url, env: awsEnv(t)}
	hook, confirmations := snsReceiver(t)
	var created struct{ TopicArn string }
	aws.ok(&created, "create-topic", "--name=orders")
	topicARN := created.TopicArn

	var subscribed struct{ SubscriptionArn string }
	aws.ok(&subscribed, "subscribe", "--topic-arn", topicARN, "--protocol", "http", "--notification-endpoint", hook.URL+"/sns",
		"--attributes", `{"FilterPolicy": "{\"color\": [\"red\"]}"}`)
	if subscribed.SubscriptionArn != "pending confirmation" {
		t.Fatalf("subscribe: SubscriptionArn %q, want SNS's %q", subscribed.SubscriptionArn, "pending confirmation")
	}
	c := <-confirmations
	if c["Type"] != "SubscriptionConfirmation" || c["TopicArn"] != topicARN || c["Token"] == "" || c["header:x-amz-sns-message-type"] != "SubscriptionConfirmation" {
		t.Fatalf("the endpoint received %v", c)
	}

	type subscription struct{ SubscriptionArn, Owner, Protocol, Endpoint, TopicArn string }
	var listed struct{ Subscriptions []subscription }
	aws.ok(&listed, "list-subscriptions-by-topic", "--topic-arn", topicARN)
	if len(listed.Subscriptions) != 1 || listed.Subscriptions[0] != (subscription{"PendingConfirmation", "", "http", hook.URL + "/sns", topicARN}) {
		t.Fatalf("list-subscriptions-by-topic: %+v", listed)
	}

	var confirmed struct{ SubscriptionArn string }
	aws.ok(&confirmed, "confirm-subscription", "--topic-arn", topicARN, "--token", c["Token"])
	arn := confirmed.SubscriptionArn
	if !strings.HasPrefix(arn, topicARN+":sns-") {
		t.Fatalf("confirm-subscription: SubscriptionArn %q, want %s:sns-...", arn, topicARN)
	}
	aws.fails("(InvalidParameter) when calling the ConfirmSubscription operation: Invalid token", "confirm-subscription", "--topic-arn", topicARN, "--token", "sns-x.00")

	// Delivered, once confirmed, in SNS's envelope: only what its filter
	// policy admits.
	for _, color := range []string{"blue", "red"} {
		aws.ok(nil, "publish", "--topic-arn", topicARN, "--message", color+" one", "--message-group-id", "k",
			"--message-attributes", `{"color": {"DataType": "String", "StringValue": "`+color+`"}}`)
	}
	select {
	case d := <-confirmations:
		if d["Type"] != "Notification" || d["Message"] != "red one" || d["TopicArn"] != topicARN ||
			d["header:x-amz-sns-message-type"] != "Notification" || !strings.Contains(d["MessageAttributes"], `"red"`) {
			t.Fatalf("the endpoint received %v; want the red one's notification", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the confirmed subscription delivered nothing")
	}
	select {
	case d := <-confirmations:
		t.Fatalf("the endpoint also received %v, which the filter policy rejects", d)
	case <-time.After(300 * time.Millisecond):
	}

	getAttrs := func() map[string]string {
		var got struct{ Attributes map[string]string }
		aws.ok(&got, "get-subscription-attributes", "--subscription-arn", arn)
		return got.Attributes
	}
	attrs := getAttrs()
	for k, want := range map[string]string{
		"SubscriptionArn": arn, "TopicArn": topicARN, "Protocol": "http", "Endpoint": hook.URL + "/sns",
		"PendingConfirmation": "false", "RawMessageDelivery": "false", "FilterPolicy": `{"color": ["red"]}`,
		"FilterPolicyScope": "MessageAttributes", "message_format": "sns",
	} {
		if attrs[k] != want {
			t.Errorf("get-subscription-attributes: %s = %q, want %q", k, attrs[k], want)
		}
	}
	aws.ok(nil, "set-subscription-attributes", "--subscription-arn", arn, "--attribute-name", "RawMessageDelivery", "--attribute-value", "true")
	aws.ok(nil, "set-subscription-attributes", "--subscription-arn", arn, "--attribute-name", "FilterPolicyScope", "--attribute-value", "MessageBody")
	aws.ok(nil, "set-subscription-attributes", "--subscription-arn", arn, "--attribute-name", "max_retries", "--attribute-value", "5")
	if attrs := getAttrs(); attrs["RawMessageDelivery"] != "true" || attrs["FilterPolicyScope"] != "MessageBody" || attrs["max_retries"] != "5" {
		t.Fatalf("after set-subscription-attributes: %v", attrs)
	}

	// Bad input: SNS's errors, and nothing changes.
	before := getAttrs()
	aws.fails(`(InvalidParameter) when calling the Subscribe operation: invalid filter_policy: key "price"`,
		"subscribe", "--topic-arn", topicARN, "--protocol", "kafka", "--notification-endpoint", "kafka://localhost",
		"--attributes", `{"FilterPolicy": "{\"price\": [{\"numeric\": [\"~\", 3]}]}"}`)
	aws.fails("(NotFound) when calling the Subscribe operation", "subscribe", "--topic-arn", "arn:aws:sns:default::nope",
		"--protocol", "http", "--notification-endpoint", hook.URL)
	aws.fails(`(InvalidParameter) when calling the Subscribe operation: herald does not deliver to Protocol "sqs"`,
		"subscribe", "--topic-arn", topicARN, "--protocol", "sqs", "--notification-endpoint", "arn:aws:sqs:us-east-1:1:q")
	aws.fails("(InvalidParameter) when calling the SetSubscriptionAttributes operation: attribute push-endpoint",
		"set-subscription-attributes", "--subscription-arn", arn, "--attribute-name", "push-endpoint", "--attribute-value", "kafka://localhost")
	aws.fails("(NotFound) when calling the GetSubscriptionAttributes operation", "get-subscription-attributes", "--subscription-arn", topicARN+":sns-nope")
	if after := getAttrs(); !maps.Equal(before, after) {
		t.Fatalf("rejected requests changed the subscription:\n%v\n%v", before, after)
	}
	if subs, _ := n.ListSubscriptions(context.Background(), "orders"); len(subs) != 2 { // with the default one
		t.Fatalf("subscriptions after rejected requests: %+v", subs)
	}

	var all struct{ Subscriptions []subscription }
	aws.ok(&all, "list-subscriptions")
	if len(all.Subscriptions) != 1 || all.Subscriptions[0].SubscriptionArn != arn {
		t.Fatalf("list-subscriptions: %+v", all)
	}
	aws.ok(nil, "unsubscribe", "--subscription-arn", arn)
	aws.fails("(NotFound) when calling the Unsubscribe operation", "unsubscribe", "--subscription-arn", arn)
	aws.ok(&listed, "list-subscriptions-by-topic", "--topic-arn", topicARN)
	if len(listed.Subscriptions) != 0 {
		t.Fatalf("list-subscriptions-by-topic after unsubscribe: %+v", listed)
	}
}

// TestBoto3Subscriptions subscribes an endpoint that confirms as SNS
// receivers do, by visiting the SubscribeURL of the confirmation, and
// pages through the subscriptions with boto3's paginator.
func TestBoto3Subscriptions(t *testing.T) {
	venv := awsVenv(t)
	url, n := startSNSServer(t, 0)
	script := `
import json, sys, threading, urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
import boto3, botocore.exceptions

received = []
class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        received.append(doc["Type"])
        if self.headers["x-amz-sns-message-type"] == "SubscriptionConfirmation":
            urllib.request.urlopen(doc["SubscribeURL"]).read()
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = HTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
endpoint = "http://127.0.0.1:%d/sns" % server.server_address[1]

sns = boto3.client("sns", endpoint_url=sys.argv[1])
out = {}
arn = sns.create_topic(Name="orders")["TopicArn"]
sub = sns.subscribe(TopicArn=arn, Protocol="http", Endpoint=endpoint, ReturnSubscriptionArn=True,
                    Attributes={"FilterPolicy": json.dumps({"color": ["red"]}), "RawMessageDelivery": "true"})["SubscriptionArn"]
out["sub"] = sub
out["received"] = received
out["attributes"] = sns.get_subscription_attributes(SubscriptionArn=sub)["Attributes"]
for i in range(120):
    sns.subscribe(TopicArn=arn if i < 99 else sns.create_topic(Name="more")["TopicArn"], Protocol="kafka", Endpoint="kafka://localhost:%d" % (9000 + i))
out["pages"] = [len(p["Subscriptions"]) for p in sns.get_paginator("list_subscriptions").paginate()]
try:
    sns.subscribe(TopicArn=arn, Protocol="kafka", Endpoint="kafka://localhost:1")
except botocore.exceptions.ClientError as e:
    out["limit"] = [e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]]
try:
    sns.unsubscribe(SubscriptionArn=arn + ":sns-nope")
except sns.exceptions.NotFoundException as e:
    out["unknown"] = e.response["Error"]["Code"]
sns.unsubscribe(SubscriptionArn=sub)
out["after"] = len(sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"])
print(json.dumps(out))
`
	var res struct {
		Sub        string
		Received   []string
		Attributes map[string]string
		Pages      []int
		Limit      []any
		Unknown    string
		After      int
	}
	runBoto3(t, venv, script, url, &res)
	if !strings.HasPrefix(res.Sub, "arn:aws:sns:default::orders:sns-") || len(res.Received) != 1 || res.Received[0] != "SubscriptionConfirmation" {
		t.Fatalf("boto3 subscribe: %+v", res)
	}
	if a := res.Attributes; a["PendingConfirmation"] != "false" || a["RawMessageDelivery"] != "true" || a["FilterPolicy"] != `{"color": ["red"]}` {
		t.Fatalf("boto3 get_subscription_attributes after the endpoint visited the SubscribeURL: %v", a)
	}
	if !slices.Equal(res.Pages, []int{100, 21}) {
		t.Fatalf("boto3's paginator: pages of %v subscriptions, want 100 and 21", res.Pages)
	}
	if len(res.Limit) != 2 || res.Limit[0] != "SubscriptionLimitExceeded" || res.Limit[1] != float64(403) {
		t.Fatalf("the 101st subscription: %v, want SubscriptionLimitExceeded 403", res.Limit)
	}
	if res.Unknown != "NotFound" || res.After != 99 {
		t.Fatalf("boto3 unsubscribe: %+v", res)
	}
	if subs, _ := n.ListSubscriptions(context.Background(), "orders"); len(subs) != 100 {
		t.Fatalf("subscriptions of orders: %d, want 99 and the default one", len(subs))
	}
}
