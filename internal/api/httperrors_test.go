package api

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// errorBody is the body of every API error: Connect's JSON.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// send makes an HTTP request and returns the response with its body read.
func send(t *testing.T, method, url string, header http.Header, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	// Not following redirects: the test looks at them.
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// wantError fails t unless the response is status with a Connect error
// body of code whose message holds every one of says.
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, code string, says ...string) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: body %q is not a JSON error (%v)", what, body, err)
		return
	}
	if resp.StatusCode != status || e.Code != code || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("%s: %d %s %+v, want %d with code %s", what, resp.StatusCode, resp.Header.Get("Content-Type"), e, status, code)
	}
	for _, s := range says {
		if !strings.Contains(e.Message, s) {
			t.Errorf("%s: message %q does not say %q", what, e.Message, s)
		}
	}
}

var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// wantNothingPublished fails t if topic has any event.
func wantNothingPublished(t *testing.T, base, topicName string) {
	t.Helper()
	status, body := callJSON(t, base, "/herald.v1.HeraldService/TopicStats", "", `{"name":"`+topicName+`"}`)
	if status != http.StatusOK || strings.Contains(body, `"published"`) {
		t.Errorf("stats of %s: %d %s, want nothing published", topicName, status, body)
	}
}

func TestJSONBodyErrorsSayWhatWasWrong(t *testing.T) {
	base, _ := startAuthServer(t, Options{})
	if status, body := callJSON(t, base, "/herald.v1.HeraldService/CreateTopic", "", `{"name":"t","attributes":{"shards":"1"}}`); status != http.StatusOK {
		t.Fatalf("create: %d %s", status, body)
	}
	publish := base + "/herald.v1.HeraldService/Publish"
	for _, tt := range []struct {
		name, body string
		says       []string
	}{
		// Connect's own codec drops the field, and the call fails with
		// "no events given" or, worse, succeeds without it.
		{"misspelled field", `{"topic":"t","evnts":[{"key":"k","payload":"eA=="}]}`,
			[]string{`unknown field "evnts"`, "PublishRequest", "topic, events", "key, payload", "base64", "docs/api.md"}},
		{"misspelled nested field", `{"topic":"t","events":[{"key":"k","paylod":"eA=="}]}`,
			[]string{`unknown field "paylod"`, "the fields of PublishEvent are key, payload, headers, dedupId"}},
		{"malformed JSON", `{"topic":"t",`, []string{"not a PublishRequest in JSON", "topic, events"}},
		{"payload not base64", `{"topic":"t","events":[{"key":"k","payload":"not base64!"}]}`, []string{"payload", "base64"}},
		{"empty body", ``, []string{"empty", "JSON object"}},
	} {
		resp, body := send(t, http.MethodPost, publish, jsonHeader, strings.NewReader(tt.body))
		wantError(t, tt.name, resp, body, http.StatusBadRequest, "invalid_argument", tt.says...)
		if strings.Contains(string(body), "proto:") {
			t.Errorf("%s: %s shows the protobuf decoder's raw error", tt.name, body)
		}
	}
	// A duration field is named in the hint with its form.
	resp, body := send(t, http.MethodPost, base+"/herald.v1.HeraldService/Fetch", jsonHeader, strings.NewReader(`{"topic":"t","wiat":"1s"}`))
	wantError(t, "fetch", resp, body, http.StatusBadRequest, "invalid_argument", `unknown field "wiat"`, "visibilityTimeout", `"5s"`)
	wantNothingPublished(t, base, "t")

	// The correct spelling publishes.
	if status, body := callJSON(t, base, "/herald.v1.HeraldService/Publish", "", `{"topic":"t","events":[{"key":"k","payload":"eA=="}]}`); status != http.StatusOK || !strings.Contains(body, `"ids":["t/0/0"]`) {
		t.Fatalf("publish: %d %s", status, body)
	}
}

func TestHTTPFailuresHaveJSONBodies(t *testing.T) {
	base, _ := startAuthServer(t, Options{})
	publish := base + "/herald.v1.HeraldService/Publish"
	body := `{"topic":"t","events":[]}`

	resp, b := send(t, http.MethodPost, publish, nil, strings.NewReader(body))
	wantError(t, "no Content-Type", resp, b, http.StatusUnsupportedMediaType, "invalid_argument", "no Content-Type", "Content-Type: application/json", "docs/api.md")
	resp, b = send(t, http.MethodPost, publish, http.Header{"Content-Type": {"text/plain"}}, strings.NewReader(body))
	wantError(t, "text/plain", resp, b, http.StatusUnsupportedMediaType, "invalid_argument", `"text/plain"`, "Content-Type: application/json")
	resp, b = send(t, http.MethodGet, publish, nil, nil)
	wantError(t, "GET", resp, b, http.StatusMethodNotAllowed, "invalid_argument", "GET /herald.v1.HeraldService/Publish", "POST", "Content-Type: application/json")
	resp, b = send(t, http.MethodPost, base+"/herald.v1.HeraldService/Publsh", jsonHeader, strings.NewReader(body))
	wantError(t, "unknown method", resp, b, http.StatusNotFound, "unimplemented", `"Publsh"`, "Publish, PublishStream, Reserve")
	// A method's own not_found (also 404) keeps its message.
	resp, b = send(t, http.MethodPost, base+"/herald.v1.HeraldService/GetTopic", jsonHeader, strings.NewReader(`{"name":"nope"}`))
	wantError(t, "unknown topic", resp, b, http.StatusNotFound, "not_found", `topic "nope" does not exist`)
	resp, b = send(t, http.MethodGet, base+"/nowhere", nil, nil)
	wantError(t, "unknown path", resp, b, http.StatusNotFound, "not_found", "/nowhere", "/herald.v1.HeraldService/<Method>", "/dashboard/")

	// The S3 path's errors have the same shape.
	resp, b = send(t, http.MethodPost, base+"/s3/t", jsonHeader, strings.NewReader("hello"))
	wantError(t, "S3 body", resp, b, http.StatusBadRequest, "invalid_argument", "not an S3 event notification", "nothing was published")
	resp, b = send(t, http.MethodPost, base+"/s3/nope", jsonHeader, strings.NewReader(`{"Records":[{"eventSource":"ceph:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`))
	wantError(t, "S3 unknown topic", resp, b, http.StatusNotFound, "not_found", `"nope"`)
	resp, b = send(t, http.MethodGet, base+"/s3/t", nil, nil)
	wantError(t, "S3 GET", resp, b, http.StatusMethodNotAllowed, "invalid_argument", "POST", "/s3/t")
	if resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("S3 GET: Allow %q, want POST", resp.Header.Get("Allow"))
	}
	resp, b = send(t, http.MethodPost, base+"/s3/", jsonHeader, strings.NewReader("{}"))
	wantError(t, "S3 without topic", resp, b, http.StatusNotFound, "not_found", "/s3/<topic>")
}

// A browser opening the node's address lands on the dashboard, with
// tokens configured too (the page holds no data).
func TestRootLeadsToDashboard(t *testing.T) {
	dashboard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the dashboard") })
	for _, opts := range []Options{{Dashboard: dashboard}, {Dashboard: dashboard, Tokens: makeTokens(t, time.Now()).store}} {
		base, _ := startAuthServer(t, opts)
		resp, b := send(t, http.MethodGet, base+"/", http.Header{"Accept": {"text/html"}}, nil)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != dashboardPath {
			t.Errorf("tokens %v: GET / = %d, Location %q, %s; want a redirect to %s", opts.Tokens != nil, resp.StatusCode, resp.Header.Get("Location"), b, dashboardPath)
		}
	}
	// Without a dashboard, the answer says what the node serves.
	base, _ := startAuthServer(t, Options{})
	resp, b := send(t, http.MethodGet, base+"/", nil, nil)
	wantError(t, "GET / without a dashboard", resp, b, http.StatusNotFound, "not_found", "/herald.v1.HeraldService/<Method>")
}

// A request over the request limit is refused as invalid (400), not as
// resource_exhausted, which clients retry and HTTP answers with 503: it
// would fail again however often it were sent. So is one that only
// decompresses to more than the limit.
func TestRequestOverLimitIsInvalid(t *testing.T) {
	base, _ := startAuthServer(t, Options{})
	if status, body := callJSON(t, base, "/herald.v1.HeraldService/CreateTopic", "", `{"name":"t","attributes":{"shards":"1"}}`); status != http.StatusOK {
		t.Fatalf("create: %d %s", status, body)
	}
	big := func() []byte {
		var b bytes.Buffer
		b.WriteString(`{"topic":"t","events":[`)
		chunk := `{"key":"k","payload":"` + strings.Repeat("QUFB", 1<<18) + `"},` // 1 MiB of base64 each
		for b.Len() <= MaxRequestBytes {
			b.WriteString(chunk)
		}
		b.WriteString(`{"key":"k"}]}`)
		return b.Bytes()
	}()
	resp, b := send(t, http.MethodPost, base+"/herald.v1.HeraldService/Publish", jsonHeader, bytes.NewReader(big))
	wantError(t, "plain", resp, b, http.StatusBadRequest, "invalid_argument", "larger than the request limit of 67108864 bytes", "smaller requests", "docs/api.md")

	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(big)
	w.Close()
	resp, b = send(t, http.MethodPost, base+"/herald.v1.HeraldService/Publish",
		http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, &gz)
	wantError(t, "gzip", resp, b, http.StatusBadRequest, "invalid_argument", "decompressed request is larger than the request limit", "smaller requests")
	wantNothingPublished(t, base, "t")

	// Under the limit, compressed, it is read.
	gz.Reset()
	w = gzip.NewWriter(&gz)
	w.Write([]byte(`{"topic":"t","events":[{"key":"k","payload":"eA=="}]}`))
	w.Close()
	resp, b = send(t, http.MethodPost, base+"/herald.v1.HeraldService/Publish",
		http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, &gz)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "t/0/0") {
		t.Fatalf("gzipped publish: %d %s", resp.StatusCode, b)
	}
}
