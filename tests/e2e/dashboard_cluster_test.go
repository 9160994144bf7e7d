package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"herald/client"
	"herald/internal/testkit"
)

// TestDashboardWithANodeDown opens node 1's dashboard in headless Chromium
// while node 3 of the cluster is down: the page shows the topics, with
// the delivery health of a push topic whose webhook refuses connections,
// says plainly that node 3 is unreachable, and shows no raw dial error.
func TestDashboardWithANodeDown(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (%v); run scripts/install-test-deps.sh, as make test does", err)
	}
	c := startCluster(t)
	ctx := context.Background()
	hook := testkit.FreeAddr(t) // nothing listens there
	if _, err := c.client(0).CreateTopic(ctx, "hooks", map[string]string{"shards": "3",
		"push_endpoint": "http://" + hook + "/events", "retry_sleep_duration": "0"}); err != nil {
		t.Fatal(err)
	}
	var events []client.Event
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		events = append(events, client.Event{Key: k, Payload: []byte(`"x"`)})
	}
	if _, err := c.client(0).Publish(ctx, "hooks", events...); err != nil {
		t.Fatal(err)
	}
	c.nodes[2].Kill()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1280, 1000))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	b, cancel := chromedp.NewContext(actx)
	defer cancel()
	b, cancelTimeout := context.WithTimeout(b, 2*time.Minute)
	defer cancelTimeout()

	node3 := "node 3 (" + c.addrs[2] + ")"
	err = chromedp.Do(b, chromedp.Navigate("http://"+c.addrs[0]+"/dashboard/"))
	for _, cond := range []string{
		`document.getElementById('status').textContent.startsWith('updated')`,
		`!!document.querySelector('section[data-topic="hooks"] [data-health]')`,
		`document.getElementById('cluster-note').textContent.includes('Unreachable: ` + node3 + `')`,
		`document.getElementById('status').textContent.includes('unreachable: ` + node3 + `')`,
		`document.querySelector('#nodes tr[data-node="3"] td:nth-child(3)').textContent === 'unreachable'`,
		// Node 1 leads a shard of hooks, or comes to: its health shows the refusal.
		`document.querySelector('section[data-topic="hooks"] [data-health]').textContent.includes('connection refused')`,
	} {
		if err != nil {
			break
		}
		_, err = chromedp.Run(b, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(30*time.Second)))
	}
	if err != nil {
		dashboardScreenshot(t, b, "dashboard-node-down-failed.png")
		page, _ := chromedp.Run(b, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("the dashboard with node 3 down: %v\npage:\n%s", err, page)
	}
	// The webhook's error names the dial that failed; the Nodes section
	// does not.
	nodes, err := chromedp.Run(b, chromedp.Evaluate[string](`document.getElementById('cluster').innerText`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(nodes, "dial tcp") {
		t.Errorf("the Nodes section shows a raw dial error:\n%s", nodes)
	}
	dashboardScreenshot(t, b, "dashboard-node-down.png")
}

// dashboardScreenshot saves the page in $HERALD_TEST_ARTIFACTS, if set.
func dashboardScreenshot(t *testing.T, b context.Context, name string) {
	t.Helper()
	dir := os.Getenv("HERALD_TEST_ARTIFACTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), png, 0o644)
	}
	if err != nil {
		t.Errorf("screenshot: %v", err)
	}
}
