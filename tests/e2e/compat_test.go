package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// compatManifest is what scripts/make-compat-datadir.sh wrote beside the
// data directory: per topic, the events a correct upgrade delivers.
type compatManifest struct {
	Commit string                 `json:"commit"`
	Topics map[string]compatTopic `json:"topics"`
}

type compatTopic struct {
	Shards  int           `json:"shards"`
	Pending []compatEvent `json:"pending"` // in publish order
	Acked   []compatEvent `json:"acked"`   // must not come again
	Dead    []compatEvent `json:"dead"`    // in the dead-letter queue, in order per shard
}

type compatEvent struct {
	ID      string `json:"id,omitempty"`
	Key     string `json:"key"`
	Payload string `json:"payload"`
}

// byKey returns the payloads of events per key, in the order given.
func byKey(events []compatEvent) map[string][]string {
	m := map[string][]string{}
	for _, e := range events {
		m[e.Key] = append(m[e.Key], e.Payload)
	}
	return m
}

// TestE2EUpgradeFromDataDirectoryOf2cb8eb9 opens, with the current herald,
// a data directory written by herald at 2cb8eb9 (before subscriptions:
// shard snapshots of version 3, commands without a subscription, topic
// records without subscriptions; see scripts/make-compat-datadir.sh) and
// checks that it delivers everything the directory held, in order per key,
// nothing acknowledged and nothing twice: the pull topic's pending events
// to a consumer, the push topic's to its endpoint once it is pointed at a
// live one, and the dead letters when replayed. Subscriptions added to the
// old topics get what they should beside the default one: the pending
// events and the new ones from the earliest event, the new ones only from
// now. After a SIGKILL and a restart on the directory, now rewritten by the
// current binary (snapshots of version 4 included), nothing acknowledged
// comes back and new events still flow.
func TestE2EUpgradeFromDataDirectoryOf2cb8eb9(t *testing.T) {
	const name = "datadir-2cb8eb9"
	var m compatManifest
	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	orders, hooks, letters := m.Topics["orders"], m.Topics["hooks"], m.Topics["letters"]
	if len(orders.Pending) == 0 || len(orders.Acked) == 0 || len(hooks.Pending) == 0 || len(letters.Dead) == 0 {
		t.Fatalf("%s.json lacks events: %d pending and %d acknowledged in orders, %d pending in hooks, %d dead letters in letters",
			name, len(orders.Pending), len(orders.Acked), len(hooks.Pending), len(letters.Dead))
	}
	dataDir := t.TempDir()
	extractTarGz(t, filepath.Join("testdata", name+".tar.gz"), dataDir)

	hooksRx, lettersRx := newReceiver(t), newReceiver(t)
	ordersBackfillRx, hooksBackfillRx := newReceiver(t), newReceiver(t)
	ordersAuditRx, hooksAuditRx := newReceiver(t), newReceiver(t)

	// Snapshots every few entries, so that the current binary writes its
	// own over the old ones, and the restart reads them.
	addr, serveArgs := testkit.FreeAddr(t), []string{"--snapshot-entries", "8"}
	srv := framework.StartServer(t, dataDir, addr, serveArgs...)
	c := client.New("http://" + addr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The topics as the old release made them.
	for topic, want := range map[string]compatTopic{"orders": orders, "hooks": hooks, "letters": letters} {
		tp, err := c.GetTopic(ctx, topic)
		if err != nil {
			t.Fatalf("topic %s written by %s: %v", topic, m.Commit, err)
		}
		if tp.Attributes["shards"] != fmt.Sprint(want.Shards) {
			t.Errorf("topic %s has shards=%s, want %d", topic, tp.Attributes["shards"], want.Shards)
		}
		// Its one subscription is the default one, the topic's own.
		subs, err := c.ListSubscriptions(ctx, topic)
		if err != nil {
			t.Fatalf("subscriptions of topic %s written by %s: %v", topic, m.Commit, err)
		}
		if len(subs) != 1 || subs[0].Name != client.DefaultSubscription || subs[0].ID != 0 ||
			subs[0].Attributes["push_endpoint"] != tp.Attributes["push_endpoint"] {
			t.Errorf("subscriptions of topic %s written by %s: %+v, want the default one alone", topic, m.Commit, subs)
		}
	}

	// A subscription from the earliest event each old topic holds gets
	// exactly the events pending there, in order per key: the cursor
	// read from the old snapshot and log knows which were acknowledged.
	for topic, rx := range map[string]*receiver{"orders": ordersBackfillRx, "hooks": hooksBackfillRx} {
		attrs := map[string]string{"push_endpoint": rx.URL, "start": "earliest"}
		if _, err := c.CreateSubscription(ctx, topic, "backfill", attrs); err != nil {
			t.Fatalf("create subscription backfill on %s: %v", topic, err)
		}
	}
	waitEvents(t, "orders' subscription backfill", ordersBackfillRx, byKey(orders.Pending))
	waitEvents(t, "hooks' subscription backfill", hooksBackfillRx, byKey(hooks.Pending))
	checkByKey(t, "orders' subscription backfill", ordersBackfillRx.byKey(), byKey(orders.Pending))
	checkByKey(t, "hooks' subscription backfill", hooksBackfillRx.byKey(), byKey(hooks.Pending))

	// The pull topic: exactly its pending events, in order per key.
	got := drainByKey(t, c, "orders")
	checkByKey(t, "orders, pulled after the upgrade", got, byKey(orders.Pending))
	acked := map[string]bool{}
	for _, e := range orders.Acked {
		acked[e.Payload] = true
	}
	for _, ps := range got {
		for _, p := range ps {
			if acked[p] {
				t.Errorf("orders: %s was acknowledged before the upgrade and came again", p)
			}
		}
	}

	// The push topic: pointed at a live endpoint, every pending event
	// arrives there once, in order per key.
	if _, err := c.SetTopicAttributes(ctx, "hooks", map[string]string{"push_endpoint": hooksRx.URL}); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, c, "hooks")
	checkByKey(t, "hooks, pushed after the upgrade", hooksRx.byKey(), byKey(hooks.Pending))

	// The dead letters: listed as they were, and replayed in order.
	dls, err := c.ListDeadLetters(ctx, "letters", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var listed []compatEvent
	for _, dl := range dls {
		listed = append(listed, compatEvent{ID: dl.ID, Key: dl.Key, Payload: string(dl.Payload)})
		if dl.Reason != "max_retries" {
			t.Errorf("dead letter %s: reason %q, want max_retries", dl.ID, dl.Reason)
		}
	}
	if !slices.Equal(listed, letters.Dead) {
		t.Fatalf("letters: dead letters after the upgrade\n%v\nwant\n%v", listed, letters.Dead)
	}
	if _, err := c.SetTopicAttributes(ctx, "letters", map[string]string{"push_endpoint": lettersRx.URL}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ReplayDeadLetters(ctx, "letters"); err != nil || n != len(letters.Dead) {
		t.Fatalf("replay the dead letters of letters: %d, %v; want %d", n, err, len(letters.Dead))
	}
	waitDelivered(t, c, "letters")
	checkByKey(t, "letters, replayed after the upgrade", lettersRx.byKey(), byKey(letters.Dead))
	if dls, err := c.ListDeadLetters(ctx, "letters", 1000); err != nil || len(dls) != 0 {
		t.Fatalf("letters after the replay: %d dead letters, %v", len(dls), err)
	}

	// A subscription on each old topic, beside its default one: both get
	// the events published from then on, and only those.
	for topic, rx := range map[string]*receiver{"orders": ordersAuditRx, "hooks": hooksAuditRx} {
		if _, err := c.CreateSubscription(ctx, topic, "audit", map[string]string{"push_endpoint": rx.URL}); err != nil {
			t.Fatalf("create subscription audit on %s: %v", topic, err)
		}
	}
	fresh := publishRound(t, c, "after the upgrade", byKey(slices.Concat(orders.Pending, orders.Acked)), byKey(hooks.Pending))
	checkByKey(t, "orders, pulled after the subscription", drainByKey(t, c, "orders"), fresh["orders"])
	waitDelivered(t, c, "hooks")
	waitEvents(t, "orders' subscription audit", ordersAuditRx, fresh["orders"])
	waitEvents(t, "hooks' subscription audit", hooksAuditRx, fresh["hooks"])
	checkByKey(t, "orders' subscription audit", ordersAuditRx.byKey(), fresh["orders"])
	checkByKey(t, "hooks' subscription audit", hooksAuditRx.byKey(), fresh["hooks"])
	hooksWant := appendByKey(byKey(hooks.Pending), fresh["hooks"])
	checkByKey(t, "hooks' default subscription", hooksRx.byKey(), hooksWant)

	// Killed and started again on the directory the current binary has
	// rewritten: nothing acknowledged comes again, and new events flow.
	srv.Kill()
	framework.StartServer(t, dataDir, addr, serveArgs...)
	for _, topic := range []string{"orders", "hooks", "letters"} {
		st, err := c.TopicStats(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if st.Total.Events != 0 || st.Total.DeadLetters != 0 {
			t.Errorf("%s after the restart: %d events pending and %d dead letters, want none", topic, st.Total.Events, st.Total.DeadLetters)
		}
	}
	again := publishRound(t, c, "after the restart", fresh["orders"], fresh["hooks"])
	checkByKey(t, "orders, pulled after the restart", drainByKey(t, c, "orders"), again["orders"])
	waitDelivered(t, c, "hooks")
	checkByKey(t, "hooks' default subscription after the restart", hooksRx.byKey(), appendByKey(hooksWant, again["hooks"]))
	// The subscriptions' acknowledgements are not in the stats: an event
	// whose acknowledgement the kill cut short may come again (delivery is
	// at least once), but only such an event, and before the new ones.
	for _, s := range []struct {
		name  string
		rx    *receiver
		fresh map[string][]string
		again map[string][]string
	}{
		{"orders' subscription audit", ordersAuditRx, fresh["orders"], again["orders"]},
		{"hooks' subscription audit", hooksAuditRx, fresh["hooks"], again["hooks"]},
		{"orders' subscription backfill", ordersBackfillRx, appendByKey(byKey(orders.Pending), fresh["orders"]), again["orders"]},
		{"hooks' subscription backfill", hooksBackfillRx, appendByKey(byKey(hooks.Pending), fresh["hooks"]), again["hooks"]},
	} {
		want := appendByKey(s.fresh, s.again)
		got := func() map[string][]string {
			got := s.rx.byKey()
			for key, ps := range got {
				got[key] = compactRepeats(ps, s.fresh[key])
			}
			return got
		}
		framework.WaitFor(t, s.name+" to receive its events after the restart", func() bool {
			g := got()
			for key, ps := range want {
				if len(g[key]) < len(ps) {
					return false
				}
			}
			return true
		})
		checkByKey(t, s.name+" after the restart", got(), want)
	}
}

// publishRound publishes, to orders and to hooks, three new events for
// each key of ordersKeys and hooksKeys, and returns them per topic and
// key.
func publishRound(t *testing.T, c *client.Client, round string, ordersKeys, hooksKeys map[string][]string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	for topic, keys := range map[string]map[string][]string{"orders": ordersKeys, "hooks": hooksKeys} {
		out[topic] = map[string][]string{}
		var events []client.Event
		for n := range 3 {
			for _, key := range slices.Sorted(maps.Keys(keys)) {
				p := fmt.Sprintf(`{"topic":%q,"key":%q,"round":%q,"n":%d}`, topic, key, round, n)
				events = append(events, client.Event{Key: key, Payload: []byte(p)})
				out[topic][key] = append(out[topic][key], p)
			}
		}
		if _, err := c.Publish(context.Background(), topic, events...); err != nil {
			t.Fatalf("publish to %s %s: %v", topic, round, err)
		}
	}
	return out
}

// appendByKey returns a with b's events appended key by key.
func appendByKey(a, b map[string][]string) map[string][]string {
	out := map[string][]string{}
	for k, v := range a {
		out[k] = slices.Clone(v)
	}
	for k, v := range b {
		out[k] = append(out[k], v...)
	}
	return out
}

// compactRepeats drops from got the second coming of events of before
// that came again right after their first one's run: what a subscription
// whose last acknowledgements were lost delivers again.
func compactRepeats(got, before []string) []string {
	if len(got) < len(before) || !slices.Equal(got[:len(before)], before) {
		return got
	}
	rest := got[len(before):]
	for len(rest) > 0 && slices.Contains(before, rest[0]) {
		rest = rest[1:]
	}
	return append(slices.Clone(before), rest...)
}

// drainByKey consumes and acknowledges everything topic has and returns
// the payloads per key in the order they came.
func drainByKey(t *testing.T, c *client.Client, topic string) map[string][]string {
	t.Helper()
	got, unreadable := framework.DrainTopic(t, c, topic)
	if len(unreadable) > 0 {
		t.Fatalf("%s: shards unreadable: %v", topic, unreadable)
	}
	out := map[string][]string{}
	for _, shard := range slices.Sorted(maps.Keys(got)) {
		for _, d := range got[shard] {
			out[d.Key] = append(out[d.Key], string(d.Payload))
		}
	}
	return out
}

// checkByKey fails t unless got holds, for every key, exactly want's
// payloads in want's order, and no other key.
func checkByKey(t *testing.T, what string, got, want map[string][]string) {
	t.Helper()
	at := func(ps []string, i int) string {
		if i < len(ps) {
			return ps[i]
		}
		return "nothing"
	}
	for _, key := range slices.Sorted(maps.Keys(want)) {
		g, w := got[key], want[key]
		if !slices.Equal(g, w) {
			i := 0
			for i < len(g) && i < len(w) && g[i] == w[i] {
				i++
			}
			t.Errorf("%s: key %s got %d events, want %d; event %d is %s, want %s", what, key, len(g), len(w), i, at(g, i), at(w, i))
		}
	}
	for key, ps := range got {
		if _, ok := want[key]; !ok && len(ps) > 0 {
			t.Errorf("%s: key %s got %d events, want none: %v", what, key, len(ps), ps)
		}
	}
}

// waitDelivered waits until topic's default subscription has nothing
// pending: every event pushed and its acknowledgement applied.
func waitDelivered(t *testing.T, c *client.Client, topic string) {
	t.Helper()
	framework.WaitFor(t, topic+"'s events to be delivered", func() bool {
		st, err := c.TopicStats(context.Background(), topic)
		return err == nil && st.Total.Events == 0
	})
}

// waitEvents waits until rx has received at least as many events per key
// as want holds, and fails t, saying how many came, if that takes over 30
// seconds.
func waitEvents(t *testing.T, what string, rx *receiver, want map[string][]string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := rx.byKey()
		var short []string
		for _, key := range slices.Sorted(maps.Keys(want)) {
			if len(got[key]) < len(want[key]) {
				short = append(short, fmt.Sprintf("%s: %d of %d", key, len(got[key]), len(want[key])))
			}
		}
		if len(short) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s to receive its events; per key, received of wanted: %s", what, strings.Join(short, ", "))
		}
	}
}

// receiver is a webhook that records what it is pushed, per key, in the
// order received, and answers 200.
type receiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string][]string
}

func newReceiver(t *testing.T) *receiver {
	rx := &receiver{got: map[string][]string{}}
	rx.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Key     string          `json:"key"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rx.mu.Lock()
		rx.got[env.Key] = append(rx.got[env.Key], string(env.Payload))
		rx.mu.Unlock()
	}))
	t.Cleanup(rx.Close)
	return rx
}

func (rx *receiver) byKey() map[string][]string {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	out := make(map[string][]string, len(rx.got))
	for k, v := range rx.got {
		out[k] = slices.Clone(v)
	}
	return out
}

// extractTarGz unpacks the gzipped tar archive at path into dir.
func extractTarGz(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) && name != "." {
			t.Fatalf("%s: entry %q outside the archive's directory", path, h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatalf("%s: %s: %v", path, h.Name, err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: entry %q of type %c", path, h.Name, h.Typeflag)
		}
	}
}
