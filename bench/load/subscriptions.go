package load

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"herald/client"
)

// PullSubscriptions gives topic exactly n pull subscriptions, none of
// which consumes: its default one and n-1 named bench-1, bench-2, and so
// on; with n = 0 it deletes the default one, and events go nowhere. It
// measures what publishing costs with subscriptions to fan out to.
func PullSubscriptions(ctx context.Context, c *client.Client, topic string, n int) error {
	if n == 0 {
		if err := c.DeleteSubscription(ctx, topic, "default"); err != nil {
			return fmt.Errorf("delete the default subscription: %w", err)
		}
		return nil
	}
	for i := 1; i < n; i++ {
		if _, err := c.CreateSubscription(ctx, topic, fmt.Sprint("bench-", i), nil); err != nil {
			return fmt.Errorf("create subscription %d: %w", i, err)
		}
	}
	return nil
}

// pushSubscriptions has n push subscriptions of topic deliver its
// backlog, from the earliest event, to url plus "s1", "s2" and so on,
// and then deletes the default subscription, which held the backlog.
func pushSubscriptions(ctx context.Context, c *client.Client, topic, url string, n int) error {
	for i := 1; i <= n; i++ {
		attrs := map[string]string{"push_endpoint": fmt.Sprint(url, "s", i), "start": "earliest"}
		if _, err := c.CreateSubscription(ctx, topic, fmt.Sprint("fan-", i), attrs); err != nil {
			return fmt.Errorf("create subscription %d: %w", i, err)
		}
	}
	if err := c.DeleteSubscription(ctx, topic, "default"); err != nil {
		return fmt.Errorf("delete the default subscription: %w", err)
	}
	return nil
}

// ServerCPU returns the CPU seconds the herald server at server (a base
// URL) has used, from process_cpu_seconds_total in its /metrics. The
// difference of two readings is the server's CPU over a phase of a run,
// whatever else runs on the machine.
func ServerCPU(ctx context.Context, hc *http.Client, server string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read the server's CPU time: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read the server's CPU time: /metrics answered %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read the server's CPU time: %w", err)
	}
	return 0, fmt.Errorf("read the server's CPU time: /metrics has no process_cpu_seconds_total")
}
