package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"herald/internal/testkit"
	"herald/tests/framework"
)

// These tests hold the real binary to the rules its commands share: how
// they fail, and what their JSON looks like.

func TestUnknownSubcommandFailsWithSuggestion(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "creat", "x", "--shards", "4"}, `unknown command "creat" for "herald topic"; did you mean create?`},
		{[]string{"dlq", "lst", "orders"}, "did you mean list?"},
		{[]string{"cluster", "stat"}, "did you mean status?"},
		{[]string{"token", "creat", "--scope", "admin"}, "did you mean create?"},
		{[]string{"bench", "publsh"}, "did you mean publish?"},
		{[]string{"topic", "frobnicate"}, `unknown command "frobnicate" for "herald topic"`},
	} {
		r := runBinary(t, "", tt.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.want) || r.stdout != "" {
			t.Errorf("herald %s: exit %d, stdout %q, stderr %q; want a failure saying %q",
				strings.Join(tt.args, " "), r.code, r.stdout, r.stderr, tt.want)
		}
	}
	// A group alone still shows its commands.
	if r := runBinary(t, "", "topic"); r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("herald topic: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestBadFlagValueSaysWhatToGive(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"topic", "create", "x", "--shards", "abc"}, `--shards "abc": want a whole number`},
		{[]string{"consume", "x", "--wait", "3"}, `--wait "3": want a duration with its unit`},
		{[]string{"topic", "create", "x", "--persistent=maybe"}, `--persistent "maybe": want true or false`},
	} {
		r := runBinary(t, "", tt.args...)
		if r.code != 1 || !strings.Contains(r.stderr, tt.want) || strings.Contains(r.stderr, "strconv") || strings.Contains(r.stderr, "time:") {
			t.Errorf("herald %s: exit %d, stderr %q; want %q and no parser's message",
				strings.Join(tt.args, " "), r.code, r.stderr, tt.want)
		}
	}
}

func TestTokenCreateJSON(t *testing.T) {
	r := runBinary(t, "", "token", "create", "--scope", "publish,consume", "--name", "ci", "-o", "json")
	var tok struct {
		Token, ID, Name, Line string
		Scopes                []string
		ExpiresAt             *string
	}
	if err := json.Unmarshal([]byte(r.stdout), &tok); r.code != 0 || err != nil {
		t.Fatalf("token create -o json: exit %d, %v; stdout %q, stderr %q", r.code, err, r.stdout, r.stderr)
	}
	if !strings.HasPrefix(tok.Token, "hrld_") || tok.Name != "ci" || !reflect.DeepEqual(tok.Scopes, []string{"publish", "consume"}) ||
		tok.ExpiresAt != nil || !strings.Contains(tok.Line, tok.ID) {
		t.Errorf("token create -o json printed %s", r.stdout)
	}
}

// apiJSON calls method of the API with JSON, as curl would, and returns
// the decoded answer.
func apiJSON(t *testing.T, addr, method, body string) map[string]any {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/herald.v1.HeraldService/"+method, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %s (%v)", method, resp.Status, data, err)
	}
	return m
}

// sameShape fails t unless every field of api is in cli with a value of
// the same JSON type, recursively: a script written against either reads
// the other.
func sameShape(t *testing.T, what string, api, cli any) {
	t.Helper()
	switch a := api.(type) {
	case map[string]any:
		c, ok := cli.(map[string]any)
		if !ok {
			t.Errorf("%s: the API has an object, the CLI %T", what, cli)
			return
		}
		for k, v := range a {
			cv, ok := c[k]
			if !ok {
				t.Errorf("%s: the CLI lacks the API's field %q (has %v)", what, k, reflect.ValueOf(c).MapKeys())
				continue
			}
			if what == "topic" && k == "attributes" {
				continue // the values are strings either way
			}
			sameShape(t, what+"."+k, v, cv)
		}
	case []any:
		c, ok := cli.([]any)
		if !ok || len(c) != len(a) {
			t.Errorf("%s: the API has %d items, the CLI %v", what, len(a), cli)
			return
		}
		for i := range a {
			sameShape(t, what, a[i], c[i])
		}
	default:
		if reflect.TypeOf(api) != reflect.TypeOf(cli) {
			t.Errorf("%s: the API gives %#v, the CLI %#v", what, api, cli)
		}
	}
}

func TestCLIJSONIsTheAPIs(t *testing.T) {
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr)
	server := "http://" + addr
	cli := func(args ...string) string {
		t.Helper()
		r := runBinary(t, "", append([]string{"--server", server}, args...)...)
		if r.code != 0 {
			t.Fatalf("herald %v: exit %d, stderr %s", args, r.code, r.stderr)
		}
		return r.stdout
	}
	decode := func(s string) any {
		t.Helper()
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("%v in %q", err, s)
		}
		return v
	}
	cli("topic", "create", "orders", "--shards", "2")
	cli("publish", "orders", "--key", "a", "one")
	cli("publish", "orders", "--key", "b", "two")

	sameShape(t, "topic", apiJSON(t, addr, "GetTopic", `{"name":"orders"}`)["topic"], decode(cli("topic", "get", "orders", "-o", "json")))
	sameShape(t, "stats", apiJSON(t, addr, "TopicStats", `{"name":"orders"}`), decode(cli("topic", "stats", "orders", "-o", "json")))
	sameShape(t, "topics", apiJSON(t, addr, "ListTopics", `{}`), decode(cli("topic", "list", "-o", "json")))
	sameShape(t, "cluster", apiJSON(t, addr, "ClusterStatus", `{}`), decode(cli("cluster", "status", "-o", "json")))

	// consume: one event per line, each the API's Event.
	// The API leases both events briefly, then consume gets them again.
	fetched := apiJSON(t, addr, "Fetch", `{"topic":"orders","maxEvents":10,"visibilityTimeout":"0.2s"}`)["events"].([]any)
	lines := strings.Split(strings.TrimSpace(cli("consume", "orders", "--wait", "5s", "--max", "2", "-o", "json")), "\n")
	if len(lines) != 2 || len(fetched) != 2 {
		t.Fatalf("consume printed %q; the API fetched %v", lines, fetched)
	}
	for i, line := range lines {
		sameShape(t, "event", fetched[i], decode(line))
	}
	for _, field := range []string{`"deliveryAttempt":2`, `"offset":"0"`} {
		if !strings.Contains(lines[0], field) {
			t.Errorf("consume -o json line %s lacks %s", lines[0], field)
		}
	}
}

func TestTopicDeleteOfPendingEventsNeedsForce(t *testing.T) {
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr)
	server := "http://" + addr
	herald := func(args ...string) result {
		return runBinary(t, "", append([]string{"--server", server}, args...)...)
	}
	for _, args := range [][]string{
		{"topic", "create", "orders", "--shards", "2"},
		{"publish", "orders", "--key", "k", "one", "two"},
		{"topic", "create", "empty"},
	} {
		if r := herald(args...); r.code != 0 {
			t.Fatalf("herald %v: %s", args, r.stderr)
		}
	}
	r := herald("topic", "delete", "orders")
	if r.code != 1 || !strings.Contains(r.stderr, "2 pending events") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("topic delete of a topic holding events, not on a terminal: exit %d, stderr %q; want a refusal naming 2 events and --force", r.code, r.stderr)
	}
	if r := herald("topic", "get", "orders"); r.code != 0 {
		t.Fatalf("the refused delete deleted the topic: %s", r.stderr)
	}
	if r := herald("topic", "delete", "orders", "--force"); r.code != 0 || r.stdout != "deleted topic orders with 2 pending events\n" {
		t.Errorf("topic delete --force: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := herald("topic", "delete", "empty"); r.code != 0 || r.stdout != "deleted topic empty\n" {
		t.Errorf("topic delete of an empty topic: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
