package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"herald/internal/api"
	"herald/internal/auth"
	"herald/internal/dashboard"
	"herald/internal/endpoint"
	"herald/internal/endpoint/endpointtest"
	"herald/internal/node"
	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// server is a node behind the API with the dashboard, and a token of
// every scope for it.
type server struct {
	url   string
	node  *node.Node
	token string
}

func startServer(t *testing.T) server {
	t.Helper()
	return startServerSampling(t, 200*time.Millisecond)
}

// startServerSampling is startServer with the dashboard sampling every
// interval.
func startServerSampling(t *testing.T, interval time.Duration) server {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	n, err := node.Open(context.Background(), node.Config{DataDir: t.TempDir(), Logger: logger, Registerer: reg,
		PushGuard: endpoint.GuardConfig{Allow: endpointtest.LoopbackCIDRs}})
	if err != nil {
		t.Fatal(err)
	}
	secret, tok, err := auth.New("dashboard", auth.Scopes, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	d := dashboard.New(n, dashboard.Config{Interval: interval, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { d.Run(ctx) })
	srv := httptest.NewServer(api.NewHandler(n, reg, api.Options{Tokens: auth.NewStore([]auth.Token{tok}), Dashboard: d, Logger: logger}))
	t.Cleanup(func() {
		srv.Close()
		cancel()
		wg.Wait()
		n.Close()
	})
	return server{url: srv.URL, node: n, token: secret}
}

func (s server) client() heraldv1connect.HeraldServiceClient {
	return heraldv1connect.NewHeraldServiceClient(http.DefaultClient, s.url, connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+s.token)
				return next(ctx, req)
			}
		})))
}

// waitFor polls cond until it holds, for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// artifactDir is where the test's screenshots go: $HERALD_TEST_ARTIFACTS,
// or a temporary directory.
func artifactDir(t *testing.T) string {
	if dir := os.Getenv("HERALD_TEST_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// browser starts Debian's chromium, headless (scripts/install-test-deps.sh
// installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("drives a Chromium process; the fast tier (-short) starts no external program")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v); run scripts/install-test-deps.sh, as make test does", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// textIs is a script that is true once the element of selector holds
// text.
func textIs(selector, text string) string {
	return `(document.querySelector(` + jsString(selector) + `) || {}).textContent === ` + jsString(text)
}

func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// poll waits until each script is true in the page, in turn.
func poll(b context.Context, scripts ...string) error {
	for _, s := range scripts {
		if _, err := chromedp.Run(b, chromedp.Poll[bool](s, chromedp.WithPollingTimeout(time.Minute))); err != nil {
			return fmt.Errorf("waiting for %s: %w", s, err)
		}
	}
	return nil
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestDashboardInChromium loads the dashboard in a real headless Chromium:
// it asks for the token, then shows a topic created through the API with
// its backlog, and replays a dead letter through its button.
func TestDashboardInChromium(t *testing.T) {
	s := startServer(t)
	var accept atomic.Bool // the receiver refuses for good until the fix
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !accept.Load() {
			http.Error(w, "order schema v2 not supported", http.StatusBadRequest)
		}
	}))
	defer receiver.Close()

	ctx := context.Background()
	c := s.client()
	for _, req := range []*heraldv1.CreateTopicRequest{
		{Name: "orders", Attributes: map[string]string{"shards": "3"}},
		{Name: "hooks", Attributes: map[string]string{"shards": "2", "push_endpoint": receiver.URL + "/events"}},
	} {
		if _, err := c.CreateTopic(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	var events []*heraldv1.PublishEvent
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		events = append(events, &heraldv1.PublishEvent{Key: k, Payload: []byte(`{"order":"` + k + `"}`)})
	}
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: events})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "hooks", Events: events[:1]})); err != nil {
		t.Fatal(err)
	}
	hooks := func() node.QueueStats {
		st, err := s.node.TopicStats(ctx, "hooks")
		if err != nil {
			t.Fatal(err)
		}
		return st.Total.Stats
	}
	waitFor(t, "the hook's event to be dead-lettered", func() bool { return hooks().DeadLetters == 1 })

	dir := artifactDir(t)
	b := browser(t)
	const (
		ordersBacklog = `section[data-topic="orders"] [data-figure="events"]`
		hooksDead     = `section[data-topic="hooks"] [data-figure="dead-letters"]`
	)
	if err := chromedp.Do(b, chromedp.Navigate(s.url+"/dashboard/"), chromedp.WaitVisible(`#login`)); err != nil {
		t.Fatalf("the dashboard did not ask for a token: %v", err)
	}
	why, err := chromedp.Run(b, chromedp.Text(`#login-why`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "needs a token") {
		t.Errorf("the login form says %q, want the server's reason", why)
	}
	err = chromedp.Do(b, chromedp.SendKeys(`#token`, s.token), chromedp.Click(`#login button[type="submit"]`))
	if err == nil {
		err = poll(b, textIs(ordersBacklog, "5"), textIs(hooksDead, "1"),
			// A few samples, so that the charts have lines.
			`document.querySelector('section[data-topic="orders"] polyline').getAttribute('points').split(' ').length >= 3`)
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-failed.png")
		t.Fatalf("the dashboard does not show the topics' backlog: %v", err)
	}
	// More events: the backlog and publish-rate charts rise.
	if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: append(events, events...)})); err != nil {
		t.Fatal(err)
	}
	if err := poll(b, textIs(ordersBacklog, "15")); err != nil {
		t.Fatalf("the dashboard does not show the new backlog: %v", err)
	}
	// The Nodes section: this node, up, holding the five shards, each led
	// by it, its preferred leader.
	err = poll(b, textIs(`#nodes tr[data-node="1"] td:nth-child(3)`, "up (this node)"),
		textIs(`#nodes tr[data-node="1"] td:nth-child(4)`, "5"),
		`document.querySelectorAll('#placement tr').length === 5`,
		textIs(`#placement tr[data-shard="orders.2"] td:nth-child(4)`, "1"),
		textIs(`#placement tr[data-shard="orders.2"] td:nth-child(3)`, "1"))
	if err != nil {
		screenshot(t, b, dir, "dashboard-failed.png")
		t.Fatalf("the dashboard does not show the node and its shards: %v", err)
	}
	replicas, err := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelector('#placement tr[data-shard="hooks"] td:nth-child(2)').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(replicas, "1 @ ") {
		t.Errorf("the hooks shard's replicas show %q, want node 1 with its applied index", replicas)
	}
	shards, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll('section[data-topic="orders"] tbody tr[data-shard]').length`))
	if err != nil {
		t.Fatal(err)
	}
	if shards != 3 {
		t.Errorf("the orders topic shows %d shards, want 3", shards)
	}
	err = chromedp.Do(b,
		chromedp.Click(`section[data-topic="hooks"] button[data-action="show-dead"]`),
		chromedp.WaitVisible(`section[data-topic="hooks"] tr[data-id] button[data-action="replay"]`),
	)
	if err != nil {
		t.Fatalf("the dead letters do not show: %v", err)
	}
	lastError, err := chromedp.Run(b, chromedp.Text(`section[data-topic="hooks"] tr[data-id]`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastError, "order schema v2 not supported") {
		t.Errorf("the dead letter's row %q does not show the receiver's answer", lastError)
	}
	// On a narrow screen too, the dead letters' words stay whole.
	for _, width := range []int64{1280, 700} {
		if err := chromedp.Do(b, chromedp.EmulateViewport(width, 1000)); err != nil {
			t.Fatal(err)
		}
		broken, err := chromedp.Run(b, chromedp.Evaluate[string](brokenWords(`section[data-topic="hooks"] .dead td`)))
		if err != nil || broken != "" {
			t.Errorf("%d pixels wide, the dead letters' table breaks a word across lines in %q (%v)", width, broken, err)
		}
	}
	if err := chromedp.Do(b, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatal(err)
	}
	checkHealthAndCharts(t, b)
	screenshot(t, b, dir, "dashboard.png")

	accept.Store(true) // the receiver is fixed; replay
	err = chromedp.Do(b, chromedp.Click(`section[data-topic="hooks"] tr[data-id] button[data-action="replay"]`))
	if err == nil {
		err = poll(b, textIs(hooksDead, "0"))
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-failed.png")
		t.Fatalf("replay through the button: %v", err)
	}
	waitFor(t, "the replayed event to be delivered", func() bool {
		st := hooks()
		return st.DeadLetters == 0 && st.Delivered == 1
	})
	err = poll(b, `document.querySelector('section[data-topic="hooks"] [data-health]').textContent.startsWith('Delivering: last success')`)
	if err != nil {
		screenshot(t, b, dir, "dashboard-failed.png")
		t.Fatalf("the hooks topic's health after the replay: %v", err)
	}
	screenshot(t, b, dir, "dashboard-replayed.png")
}

// brokenWords is a script that returns the text of the first cell under
// selector in which a word is split across lines, or "".
func brokenWords(selector string) string {
	return `(() => {
  for (const td of document.querySelectorAll(` + jsString(selector) + `)) {
    const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      for (const m of n.textContent.matchAll(/\S+/g)) {
        const r = document.createRange();
        r.setStart(n, m.index);
        r.setEnd(n, m.index + m[0].length);
        if (r.getClientRects().length > 1) return td.textContent;
      }
    }
  }
  return "";
})()`
}

// checkHealthAndCharts: the hooks topic, whose receiver refused its event,
// says so with the receiver's answer, in its health line and its shard's
// row; the charts have a time axis, and the backlog chart, of counts, says
// its maximum as a whole number.
func checkHealthAndCharts(t *testing.T, b context.Context) {
	t.Helper()
	const hooks = `section[data-topic="hooks"]`
	health, err := chromedp.Run(b, chromedp.Text(hooks+` [data-health]`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(health, "Failing: 1 failed attempt since") || !strings.Contains(health, "order schema v2 not supported") {
		t.Errorf("the hooks topic's health line says %q, want its failure and the receiver's answer", health)
	}
	rows, err := chromedp.Run(b, chromedp.Evaluate[string](`[...document.querySelectorAll('`+hooks+` tbody tr[data-shard]')].map(r => r.textContent).join('\n')`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rows, "order schema v2 not supported") {
		t.Errorf("no shard row of the hooks topic shows the last push error:\n%s", rows)
	}
	const orders = `section[data-topic="orders"]`
	note, err := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelectorAll('`+orders+` .chart .note')[1].textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^\(max [0-9][0-9,]*\)$`).MatchString(note) {
		t.Errorf("the backlog chart says %q, want its maximum as a whole number", note)
	}
	ticks, err := chromedp.Run(b, chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+orders+` .chart .axis span')].map(s => s.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	clock := regexp.MustCompile(`\d{1,2}:\d{2}:\d{2}`)
	if len(ticks) != 6 || !clock.MatchString(ticks[0]) || !clock.MatchString(ticks[2]) {
		t.Errorf("the charts' time axes say %q, want the times of the first, middle and last samples", ticks)
	}
}

// TestDashboardDataNeedsAToken: the page is public, its data is not.
func TestDashboardDataNeedsAToken(t *testing.T) {
	s := startServer(t)
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/dashboard/", "", http.StatusOK},
		{"/dashboard/app.js", "", http.StatusOK},
		{"/dashboard/data/state", "", http.StatusUnauthorized},
		{"/dashboard/data/state", s.token, http.StatusOK},
		{"/dashboard/nothing", s.token, http.StatusNotFound},
	} {
		req, _ := http.NewRequest(http.MethodGet, s.url+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s (token %v): %d, want %d", tc.path, tc.token != "", resp.StatusCode, tc.want)
		}
	}
}

// TestDashboardSubscriptions: a topic's subscriptions show with their
// endpoint, filter, lag, delivery rate, dead letters and health, and
// their buttons disable one, with the reason the user gives, and enable
// it again, replay one from the earliest event, and list and replay a
// subscription's dead letters.
func TestDashboardSubscriptions(t *testing.T) {
	s := startServer(t)
	accepting := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer accepting.Close()
	var fixed atomic.Bool // the refusing receiver refuses for good until fixed
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !fixed.Load() {
			http.Error(w, "no such hook", http.StatusBadRequest)
		}
	}))
	defer refusing.Close()

	ctx := context.Background()
	c := s.client()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "2"}})); err != nil {
		t.Fatal(err)
	}
	for name, attrs := range map[string]map[string]string{
		"billing": {"push_endpoint": accepting.URL + "/paid", "filter_policy": `{"type": ["paid"]}`},
		"flaky":   {"push_endpoint": refusing.URL},
		"audit":   nil, // pull
	} {
		if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: name, Attributes: attrs})); err != nil {
			t.Fatal(err)
		}
	}
	publishTyped := func(types ...string) {
		t.Helper()
		var events []*heraldv1.PublishEvent
		for i, typ := range types {
			events = append(events, &heraldv1.PublishEvent{Key: fmt.Sprint("k", i), Payload: []byte("{}"), Headers: map[string]string{"type": typ}})
		}
		if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: events})); err != nil {
			t.Error(err)
		}
	}
	publishTyped("paid", "refunded", "paid", "refunded")
	subStats := func(name string) node.QueueStats {
		st, err := s.node.SubscriptionStats(ctx, "orders", name)
		if err != nil {
			return node.QueueStats{}
		}
		return st.Total.Stats
	}
	waitFor(t, "billing's deliveries and flaky's dead letters", func() bool {
		return subStats("billing").Delivered == 2 && subStats("billing").Skipped == 2 && subStats("flaky").DeadLetters == 4
	})

	dir := artifactDir(t)
	b := browser(t)
	err := chromedp.Do(b, chromedp.Navigate(s.url+"/dashboard/"), chromedp.WaitVisible(`#login`),
		chromedp.SendKeys(`#token`, s.token), chromedp.Click(`#login button[type="submit"]`))
	if err != nil {
		t.Fatal(err)
	}
	row := func(name string) string { return `section[data-topic="orders"] tr[data-subscription="` + name + `"]` }
	cell := func(name, c string) string { return row(name) + ` [data-cell="` + c + `"]` }
	text := func(selector string) string {
		return `((document.querySelector(` + jsString(selector) + `) || {}).textContent || "")`
	}
	err = poll(b,
		textIs(cell("default", "lag"), "4"), textIs(cell("audit", "lag"), "4"),
		textIs(row("audit")+` td:nth-child(2)`, "pull"), textIs(cell("audit", "health"), "pull"),
		textIs(cell("billing", "lag"), "0"), textIs(cell("billing", "dead"), "0"),
		textIs(row("billing")+` td:nth-child(2)`, accepting.URL+"/paid"),
		textIs(row("billing")+` td:nth-child(3)`, `{"type": ["paid"]}`),
		text(cell("billing", "health"))+`.startsWith("ok, last success")`,
		textIs(cell("flaky", "dead"), "4"),
		text(cell("flaky", "health"))+`.startsWith("failing: ")`,
		text(cell("flaky", "health"))+`.includes("no such hook")`,
	)
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("the dashboard does not show the subscriptions: %v", err)
	}

	// While events flow, billing's delivery rate shows them.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
				publishTyped("paid")
			}
		}
	})
	err = poll(b, text(cell("billing", "rate"))+` !== "0.00" && `+text(cell("billing", "rate"))+` !== ""`)
	close(done)
	wg.Wait()
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("billing's delivery rate: %v", err)
	}
	screenshot(t, b, dir, "dashboard-subscriptions.png")

	// Disable billing, giving the reason the page asks for, then enable it.
	click := func(selector string) error {
		_, err := chromedp.Run(b, chromedp.Evaluate[bool](`(() => { document.querySelector(`+jsString(selector)+`).click(); return true; })()`))
		return err
	}
	if _, err := chromedp.Run(b, chromedp.Evaluate[bool](`(() => { window.prompt = () => "billing is migrating"; return true; })()`)); err != nil {
		t.Fatal(err)
	}
	err = click(row("billing") + ` button[data-action="disable-subscription"]`)
	if err == nil {
		err = poll(b, text(cell("billing", "state"))+`.startsWith("disabled ")`,
			text(cell("billing", "state"))+`.endsWith(": billing is migrating")`,
			textIs(cell("billing", "health"), "not delivering"),
			`!!document.querySelector(`+jsString(row("billing")+` button[data-action="enable-subscription"]`)+`)`)
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("disable through the button: %v", err)
	}
	if sub, err := s.node.GetSubscription(ctx, "orders", "billing"); err != nil || !sub.Disabled || sub.DisabledReason != "billing is migrating" {
		t.Errorf("after the disable button, billing is %+v (%v)", sub, err)
	}
	screenshot(t, b, dir, "dashboard-subscription-disabled.png")
	err = click(row("billing") + ` button[data-action="enable-subscription"]`)
	if err == nil {
		err = poll(b, textIs(cell("billing", "state"), "enabled"))
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("enable through the button: %v", err)
	}
	if sub, err := s.node.GetSubscription(ctx, "orders", "billing"); err != nil || sub.Disabled {
		t.Errorf("after the enable button, billing is %+v (%v)", sub, err)
	}

	// Replay billing from the earliest event: audit, a pull subscription
	// nobody reads, keeps every event held, so each is made pending for
	// billing again, and the paid ones delivered again.
	waitFor(t, "billing to deliver its backlog", func() bool { return subStats("billing").Events == 0 })
	held := subStats("audit").Events
	delivered := subStats("billing").Delivered
	if _, err := chromedp.Run(b, chromedp.Evaluate[bool](`(() => { window.confirm = m => { window.confirmed = m; return true; }; return true; })()`)); err != nil {
		t.Fatal(err)
	}
	err = click(row("billing") + ` button[data-action="seek-earliest"]`)
	if err == nil {
		err = poll(b, textIs(`#status`, fmt.Sprintf("replayed %d events from the earliest to subscription billing of orders", held)))
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("replay from the earliest through the button: %v (the status says %q)", err, status(b))
	}
	if asked, err := chromedp.Run(b, chromedp.Evaluate[string](`window.confirmed`)); err != nil || !strings.Contains(asked, "Every event the topic still holds will be delivered to this subscription again") {
		t.Errorf("before replaying from the earliest, the page asked %q (%v)", asked, err)
	}
	waitFor(t, "billing's events to be delivered again", func() bool {
		st := subStats("billing")
		return st.Events == 0 && st.Delivered >= 2*delivered
	})

	// flaky's dead letters (the events its receiver refused), listed through
	// its row's button, and replayed once the receiver is fixed.
	waitFor(t, "flaky to dead-letter every event", func() bool { return subStats("flaky").DeadLetters == held })
	dead := `section[data-topic="orders"] .dead[data-subscription="flaky"]`
	err = poll(b, textIs(row("flaky")+` button[data-action="show-subscription-dead"]`, fmt.Sprintf("Dead letters (%d)", held)))
	if err == nil {
		err = click(row("flaky") + ` button[data-action="show-subscription-dead"]`)
	}
	if err == nil {
		err = poll(b, fmt.Sprintf(`document.querySelectorAll(%s).length === %d`, jsString(dead+` tr[data-id]`), min(held, 100)),
			text(dead+` tr[data-id]`)+`.includes("no such hook")`,
			textIs(dead+` strong`, "Dead letters of subscription flaky"))
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("flaky's dead letters through its button: %v", err)
	}
	screenshot(t, b, dir, "dashboard-subscription-dead-letters.png")
	fixed.Store(true)
	err = click(dead + ` button[data-action="replay-all"]`)
	if err == nil {
		err = poll(b, textIs(`#status`, fmt.Sprintf("replayed %d of subscription flaky of orders", held)))
	}
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("replay of flaky's dead letters through the button: %v (the status says %q)", err, status(b))
	}
	waitFor(t, "flaky's replayed dead letters to be delivered", func() bool {
		st := subStats("flaky")
		return st.DeadLetters == 0 && st.Delivered == uint64(held)
	})
	if other := subStats("billing").DeadLetters + subStats("default").DeadLetters; other != 0 {
		t.Errorf("the other subscriptions hold %d dead letters, want none", other)
	}
	err = poll(b, textIs(cell("flaky", "dead"), "0"),
		`!document.querySelector(`+jsString(row("flaky")+` button[data-action="show-subscription-dead"]`)+`)`,
		`!document.querySelector(`+jsString(dead)+`)`)
	if err != nil {
		screenshot(t, b, dir, "dashboard-subscriptions-failed.png")
		t.Fatalf("flaky after its dead letters' replay: %v", err)
	}
}

// status is the text of the page's status line, or the error reading it.
func status(b context.Context) string {
	s, err := chromedp.Run(b, chromedp.Text(`#status`))
	if err != nil {
		return err.Error()
	}
	return s
}

// TestDashboardChartsIdleAndBusy: the charts go on while a topic is idle
// (its counters are then repeated, not read again), with rates of zero,
// and a change shows in the first sample taken after it, for the topic and
// for its subscriptions.
func TestDashboardChartsIdleAndBusy(t *testing.T) {
	// A rate shows for one interval: long enough here for the test's
	// polling to see it on a busy machine.
	s := startServerSampling(t, time.Second)
	accepting := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer accepting.Close()
	ctx := context.Background()
	c := s.client()
	if _, err := c.CreateTopic(ctx, connect.NewRequest(&heraldv1.CreateTopicRequest{Name: "orders", Attributes: map[string]string{"shards": "2"}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateSubscription(ctx, connect.NewRequest(&heraldv1.CreateSubscriptionRequest{Topic: "orders", Name: "hook",
		Attributes: map[string]string{"push_endpoint": accepting.URL}})); err != nil {
		t.Fatal(err)
	}
	publish := func(n int) {
		t.Helper()
		var events []*heraldv1.PublishEvent
		for i := range n {
			events = append(events, &heraldv1.PublishEvent{Key: fmt.Sprint("k", i), Payload: []byte("{}")})
		}
		if _, err := c.Publish(ctx, connect.NewRequest(&heraldv1.PublishRequest{Topic: "orders", Events: events})); err != nil {
			t.Fatal(err)
		}
	}
	var st struct {
		Topics []struct {
			Name    string
			History struct {
				Time         []int64   `json:"time"`
				PublishRate  []float64 `json:"publish_rate"`
				DeliveryRate []float64 `json:"delivery_rate"`
				Backlog      []int64
			}
			Subscriptions []struct {
				Name         string
				Delivered    uint64
				DeliveryRate float64 `json:"delivery_rate"`
			}
		}
	}
	orders := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.url+"/dashboard/data/state", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		for i, tp := range st.Topics {
			if tp.Name == "orders" {
				return i
			}
		}
		t.Fatal("the dashboard does not show topic orders")
		return 0
	}
	hookRate := func(i int) float64 {
		for _, sub := range st.Topics[i].Subscriptions {
			if sub.Name == "hook" {
				return sub.DeliveryRate
			}
		}
		return -1
	}
	// lastTime is the time of the newest sample.
	lastTime := func(i int) int64 {
		if h := st.Topics[i].History.Time; len(h) > 0 {
			return h[len(h)-1]
		}
		return 0
	}

	var backlog int64 // the default subscription's: nothing pulls
	for round, n := range []int{3, 2} {
		publish(n)
		backlog += int64(n)
		i := orders()
		published := lastTime(i)
		// The sample under way as the publish was acknowledged may have
		// read before it; every sample begun after shows it. hook's
		// deliveries show in its rate for the interval they fell in, once
		// it has a sample before them (not so in the first round: it may
		// have started on its shards after the sample that followed its
		// creation).
		sawRate := round == 0
		waitFor(t, "two samples after the publish, and hook's deliveries in its rate", func() bool {
			i = orders()
			sawRate = sawRate || hookRate(i) > 0
			n := 0
			for _, at := range st.Topics[i].History.Time {
				if at > published {
					n++
				}
			}
			return n >= 2 && sawRate
		})
		h := st.Topics[i].History
		seen := 0
		for k, at := range h.Time {
			if at <= published {
				continue
			}
			if seen++; seen > 1 && h.Backlog[k] != backlog {
				t.Fatalf("round %d: a sample begun after the publish shows a backlog of %d, want %d: %+v", round, h.Backlog[k], backlog, h)
			}
		}
		// Idle: the samples go on, with rates of zero.
		before := len(st.Topics[i].History.Time)
		waitFor(t, "idle samples with rates of zero", func() bool {
			i = orders()
			h := st.Topics[i].History
			n := len(h.Time)
			return n >= before+3 && h.PublishRate[n-1] == 0 && hookRate(i) == 0
		})
		if h := st.Topics[i].History; h.Backlog[len(h.Backlog)-1] != backlog {
			t.Fatalf("round %d: an idle topic's samples show a backlog of %d, want %d", round, h.Backlog[len(h.Backlog)-1], backlog)
		}
	}
}
