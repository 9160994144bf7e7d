package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/auth"
	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// testTokens are a token of each scope, one with them all, and an expired
// one, by name; the secrets are what clients send.
type testTokens struct {
	secrets map[string]string
	store   *auth.Store
}

func makeTokens(t *testing.T, now time.Time) testTokens {
	t.Helper()
	tt := testTokens{secrets: map[string]string{}}
	var all []auth.Token
	for name, spec := range map[string]struct {
		scopes  []auth.Scope
		expires time.Time
	}{
		"admin":   {scopes: []auth.Scope{auth.ScopeAdmin}},
		"publish": {scopes: []auth.Scope{auth.ScopePublish}},
		"consume": {scopes: []auth.Scope{auth.ScopeConsume}},
		"all":     {scopes: auth.Scopes},
		"expired": {scopes: auth.Scopes, expires: now.Add(-time.Minute)},
	} {
		secret, tok, err := auth.New(name, spec.scopes, spec.expires)
		if err != nil {
			t.Fatal(err)
		}
		tt.secrets[name] = secret
		all = append(all, tok)
	}
	tt.store = auth.NewStore(all)
	return tt
}

// syncBuffer is a bytes.Buffer the server's goroutines may write to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAuthServer serves a node with opts, over plain HTTP/1 and
// unencrypted HTTP/2, and returns its URL and the node.
func startAuthServer(t *testing.T, opts Options) (string, *node.Node) {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := node.Open(context.Background(), node.Config{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(NewHandler(n, reg, opts))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		n.Close()
	})
	return srv.URL, n
}

// callJSON calls a procedure with the Connect protocol's JSON and returns
// the HTTP status and body.
func callJSON(t *testing.T, base, procedure, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+procedure, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEveryProcedureHasAScope: a procedure added to the service without an
// entry in the route table would need admin, silently.
func TestEveryProcedureHasAScope(t *testing.T) {
	methods := heraldv1.File_herald_v1_herald_proto.Services().ByName("HeraldService").Methods()
	for i := range methods.Len() {
		proc := "/" + heraldv1connect.HeraldServiceName + "/" + string(methods.Get(i).Name())
		if _, ok := procedureScopes[proc]; !ok {
			t.Errorf("%s has no entry in procedureScopes", proc)
		}
	}
}

// TestTokenScopesOnEveryProcedure calls every procedure with a token of
// each scope: the scope the route table gives it gets through, the others
// get 403 naming the scope needed.
func TestTokenScopesOnEveryProcedure(t *testing.T) {
	tt := makeTokens(t, time.Now())
	base, _ := startAuthServer(t, Options{Tokens: tt.store})
	for proc, need := range procedureScopes {
		for _, name := range []string{"admin", "publish", "consume", "all"} {
			allowed := need == anyScope || name == "all" || name == string(need)
			// "{}" is a valid request of every procedure; most fail in the
			// node (no such topic), which is past the token check.
			status, body := callJSON(t, base, proc, tt.secrets[name], "{}")
			refused := status == http.StatusForbidden || status == http.StatusUnauthorized
			switch {
			case allowed && refused:
				t.Errorf("%s with a %s token: %d %s, want it let through", procedureName(proc), name, status, body)
			case !allowed && status != http.StatusForbidden:
				t.Errorf("%s with a %s token: %d %s, want 403", procedureName(proc), name, status, body)
			case !allowed && !strings.Contains(body, "needs a token with the "+string(need)+" scope"):
				t.Errorf("%s with a %s token: body %s does not name the %s scope", procedureName(proc), name, body, need)
			}
			if strings.Contains(body, tt.secrets[name]) {
				t.Errorf("response %s shows the token", body)
			}
		}
	}
}

// TestBadTokensGet401AndChangeNothing: a missing, malformed, unknown,
// wrong or expired token is refused with 401 saying which scope is needed,
// and the refused requests change nothing.
func TestBadTokensGet401AndChangeNothing(t *testing.T) {
	tt := makeTokens(t, time.Now())
	base, n := startAuthServer(t, Options{Tokens: tt.store})
	wrong := tt.secrets["admin"][:len(tt.secrets["admin"])-1] + "0" // a known id with the wrong secret
	if wrong == tt.secrets["admin"] {
		wrong = tt.secrets["admin"][:len(tt.secrets["admin"])-1] + "1"
	}
	unknown, _, err := auth.New("unknown", auth.Scopes, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, want string
	}{
		{"missing", "", "no token"},
		{"malformed", "not-a-token", "malformed token"},
		{"unknown", unknown, "unknown or wrong token"},
		{"wrong secret", wrong, "unknown or wrong token"},
		{"expired", tt.secrets["expired"], "expired"},
	} {
		status, body := callJSON(t, base, heraldv1connect.HeraldServiceCreateTopicProcedure, tc.token, `{"name":"orders"}`)
		if status != http.StatusUnauthorized || !strings.Contains(body, tc.want) || !strings.Contains(body, "CreateTopic needs a token with the admin scope") {
			t.Errorf("%s token: %d %s, want 401 saying %q and the scope", tc.name, status, body, tc.want)
		}
		if tc.token != "" && strings.Contains(body, tc.token) {
			t.Errorf("%s token: the response shows the token", tc.name)
		}
	}
	status, body := callJSON(t, base, heraldv1connect.HeraldServiceCreateTopicProcedure, tt.secrets["publish"], `{"name":"orders"}`)
	if status != http.StatusForbidden {
		t.Fatalf("CreateTopic with a publish token: %d %s", status, body)
	}
	if topics := n.ListTopics(); len(topics) != 0 {
		t.Fatalf("refused requests created topics %v", topics)
	}

	// A topic created with the right token; refused publishes and acks
	// leave it untouched.
	if status, body := callJSON(t, base, heraldv1connect.HeraldServiceCreateTopicProcedure, tt.secrets["admin"], `{"name":"orders","attributes":{"shards":"1"}}`); status != http.StatusOK {
		t.Fatalf("CreateTopic with an admin token: %d %s", status, body)
	}
	pub := `{"topic":"orders","events":[{"key":"k","payload":"eA=="}]}`
	for _, tok := range []string{"", tt.secrets["consume"], tt.secrets["admin"], tt.secrets["expired"]} {
		if status, body := callJSON(t, base, heraldv1connect.HeraldServicePublishProcedure, tok, pub); status != http.StatusUnauthorized && status != http.StatusForbidden {
			t.Errorf("Publish without the publish scope: %d %s", status, body)
		}
	}
	if published := totals(t, n, "orders").Published; published != 0 {
		t.Errorf("refused publishes published %d events", published)
	}
}

// TestTokenErrorsInEveryProtocol: gRPC and Connect clients see the refusal
// as the codes unauthenticated and permission_denied, with the message.
func TestTokenErrorsInEveryProtocol(t *testing.T) {
	tt := makeTokens(t, time.Now())
	base, _ := startAuthServer(t, Options{Tokens: tt.store})
	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}, {"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		hc := &http.Client{Transport: &http.Transport{Protocols: unencryptedHTTP2()}}
		c := heraldv1connect.NewHeraldServiceClient(hc, base, proto.opts...)
		for _, tc := range []struct {
			token string
			code  connect.Code
		}{{"", connect.CodeUnauthenticated}, {tt.secrets["consume"], connect.CodePermissionDenied}} {
			req := connect.NewRequest(&heraldv1.DeleteTopicRequest{Name: "orders"})
			if tc.token != "" {
				req.Header().Set("Authorization", "Bearer "+tc.token)
			}
			_, err := c.DeleteTopic(context.Background(), req)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != tc.code || !strings.Contains(ce.Message(), "DeleteTopic needs a token with the admin scope") {
				t.Errorf("%s: DeleteTopic = %v, want %v naming the admin scope", proto.name, err, tc.code)
			}
		}
	}
}

func unencryptedHTTP2() *http.Protocols {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &p
}

// TestRoutesOtherThanProcedures: health checks stay open; /metrics needs
// a token only when asked; SNS Actions need the scope of what they do; a
// path no route names needs admin.
func TestRoutesOtherThanProcedures(t *testing.T) {
	tt := makeTokens(t, time.Now())
	for _, metricsNeedToken := range []bool{false, true} {
		base, _ := startAuthServer(t, Options{Tokens: tt.store, MetricsNeedToken: metricsNeedToken})
		get := func(path, token string) int {
			req, _ := http.NewRequest(http.MethodGet, base+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		for _, p := range []string{"/healthz", "/readyz"} {
			if got := get(p, ""); got != http.StatusOK {
				t.Errorf("%s without a token: %d, want 200", p, got)
			}
		}
		// A receiver visiting a SubscribeURL has no token: it reaches the
		// SNS API, which finds no such topic.
		if resp, err := http.Get(base + "/?Action=ConfirmSubscription&TopicArn=arn:aws:sns:default::nope&Token=sns-a.00"); err != nil {
			t.Fatal(err)
		} else {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "<Code>NotFound</Code>") {
				t.Errorf("a SubscribeURL without a token: %d %s, want the SNS API's 404", resp.StatusCode, body)
			}
		}
		wantMetrics := http.StatusOK
		if metricsNeedToken {
			wantMetrics = http.StatusUnauthorized
		}
		if got := get("/metrics", ""); got != wantMetrics {
			t.Errorf("MetricsNeedToken %v: /metrics without a token: %d, want %d", metricsNeedToken, got, wantMetrics)
		}
		if got := get("/metrics", tt.secrets["consume"]); got != http.StatusOK {
			t.Errorf("/metrics with a consume token: %d, want 200", got)
		}
		for token, want := range map[string]int{"": http.StatusUnauthorized, "consume": http.StatusForbidden, "admin": http.StatusForbidden} {
			req, _ := http.NewRequest(http.MethodPost, base+s3IngestPath+"orders", strings.NewReader(`{"Records":[]}`))
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.secrets[token])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("S3 ingest with a %q token: %d, want %d (it needs publish)", token, resp.StatusCode, want)
			}
		}
		if got := get("/no/such/route", tt.secrets["publish"]); got != http.StatusForbidden {
			t.Errorf("an unknown path with a publish token: %d, want 403 (admin)", got)
		}
	}

	base, _ := startAuthServer(t, Options{Tokens: tt.store})
	snsSigned := func(action, authorization string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+snsPath, strings.NewReader(url.Values{"Action": {action}, "Name": {"orders"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sns := func(action, token string) (int, string) {
		if token == "" {
			return snsSigned(action, "")
		}
		return snsSigned(action, "Bearer "+token)
	}
	for _, tc := range []struct {
		action, token string
		refused       int // 0: let through
	}{
		{"CreateTopic", "publish", http.StatusForbidden},
		{"DeleteTopic", "consume", http.StatusForbidden},
		{"SetTopicAttributes", "publish", http.StatusForbidden},
		{"CreateTopic", "admin", 0},
		{"Publish", "consume", http.StatusForbidden},
		{"Publish", "publish", 0},
		{"PublishBatch", "consume", http.StatusForbidden},
		{"PublishBatch", "publish", 0},
		{"ListTopics", "consume", 0},
		{"Publish", "", http.StatusUnauthorized},
		{"Publish", "sigv4:publish", 0},
		{"CreateTopic", "sigv4:publish", http.StatusForbidden},
		{"Publish", "sigv4:unknown", http.StatusUnauthorized},
		{"Subscribe", "publish", http.StatusForbidden},
		{"Subscribe", "admin", 0},
		{"Unsubscribe", "consume", http.StatusForbidden},
		{"SetSubscriptionAttributes", "publish", http.StatusForbidden},
		{"ListSubscriptions", "consume", 0},
		{"ListSubscriptionsByTopic", "publish", 0},
		{"GetSubscriptionAttributes", "consume", 0},
		{"ConfirmSubscription", "", 0}, // the confirmation token is its credential
	} {
		status, body := sns(tc.action, tt.secrets[tc.token])
		if key, ok := strings.CutPrefix(tc.token, "sigv4:"); ok {
			// As the aws CLI signs, with the token as the access key id.
			if tok, known := tt.secrets[key]; known {
				key = tok
			}
			status, body = snsSigned(tc.action, "AWS4-HMAC-SHA256 Credential="+key+"/20261123/us-east-1/sns/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123")
		}
		if tc.refused != 0 && (status != tc.refused || !strings.Contains(body, "SNS "+tc.action+" needs a token")) {
			t.Errorf("SNS %s with a %q token: %d %s, want %d", tc.action, tc.token, status, body, tc.refused)
		}
		if tc.refused == 0 && (status == http.StatusForbidden || status == http.StatusUnauthorized) {
			t.Errorf("SNS %s with a %q token: %d %s, want it let through", tc.action, tc.token, status, body)
		}
	}
}

// TestWithoutTokensEverythingIsOpen: with no token store (loopback only,
// which serve enforces), requests need no token.
func TestWithoutTokensEverythingIsOpen(t *testing.T) {
	base, n := startAuthServer(t, Options{})
	if status, body := callJSON(t, base, heraldv1connect.HeraldServiceCreateTopicProcedure, "", `{"name":"orders"}`); status != http.StatusOK {
		t.Fatalf("CreateTopic without tokens configured: %d %s", status, body)
	}
	if len(n.ListTopics()) != 1 {
		t.Fatal("topic not created")
	}
}

// TestAuditLog: administration is logged with who, what, which topic and
// the outcome, without attribute values or the token; other calls are not.
func TestAuditLog(t *testing.T) {
	tt := makeTokens(t, time.Now())
	var logs syncBuffer
	base, _ := startAuthServer(t, Options{Tokens: tt.store, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	callJSON(t, base, heraldv1connect.HeraldServiceCreateTopicProcedure, tt.secrets["admin"], `{"name":"orders","attributes":{"signing_secret":"hunter2","shards":"1"}}`)
	callJSON(t, base, heraldv1connect.HeraldServiceCreateTopicProcedure, tt.secrets["all"], `{"name":"orders"}`)
	callJSON(t, base, heraldv1connect.HeraldServicePurgeDeadLettersProcedure, tt.secrets["admin"], `{"topic":"orders","ids":["orders/0/0"]}`)
	callJSON(t, base, heraldv1connect.HeraldServicePublishProcedure, tt.secrets["all"], `{"topic":"orders","events":[{"key":"k"}]}`)
	callJSON(t, base, heraldv1connect.HeraldServiceDeleteTopicProcedure, tt.secrets["publish"], `{"name":"orders"}`) // refused before the service
	admin, _ := tt.store.Lookup(idOf(tt.secrets["admin"]))
	all, _ := tt.store.Lookup(idOf(tt.secrets["all"]))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`msg=audit audit.who="admin (token ` + admin.ID + `)" audit.remote=127.0.0.1:`,
		`audit.action=CreateTopic audit.topic=orders audit.attributes="[shards signing_secret]" audit.result=ok`,
		`msg=audit audit.who="all (token ` + all.ID + `)"`,
		`audit.action=CreateTopic audit.topic=orders audit.attributes=[] audit.result=already_exists`,
		`audit.action=PurgeDeadLetters audit.topic=orders audit.ids=[orders/0/0] audit.result=ok`,
	}
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3 audit lines:\n%s", len(lines), logs.String())
	}
	for i, w := range want {
		line := lines[[]int{0, 0, 1, 1, 2}[i]]
		if !strings.Contains(line, w) {
			t.Errorf("audit line %q does not say %q", line, w)
		}
	}
	for _, secret := range []string{"hunter2", tt.secrets["admin"], tt.secrets["all"]} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows a secret: %s", logs.String())
		}
	}
}

// TestAuditLogOfSNS: topic administration through the SNS API is
// audited too, with the topic and the attribute names, not their values.
func TestAuditLogOfSNS(t *testing.T) {
	tt := makeTokens(t, time.Now())
	var logs syncBuffer
	base, _ := startAuthServer(t, Options{Tokens: tt.store, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	form := url.Values{"Action": {"CreateTopic"}, "Name": {"fish"},
		"Attributes.entry.1.key": {"OpaqueData"}, "Attributes.entry.1.value": {"hunter2"}}
	req, _ := http.NewRequest(http.MethodPost, base+snsPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+tt.secrets["admin"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	admin, _ := tt.store.Lookup(idOf(tt.secrets["admin"]))
	want := `msg=audit audit.who="admin (token ` + admin.ID + `)" audit.remote=127.0.0.1:`
	want2 := `audit.action="SNS CreateTopic" audit.topic=fish audit.attributes=[OpaqueData] audit.result=ok`
	if !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), want2) || strings.Contains(logs.String(), "hunter2") {
		t.Errorf("audit log:\n%s\nwant %q and %q, without the attribute's value", logs.String(), want, want2)
	}
}

func idOf(token string) string { return strings.TrimPrefix(token, "hrld_")[:16] }
