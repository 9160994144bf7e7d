package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/internal/testkit/faultproxy"
	"herald/internal/testkit/heraldproc"
	"herald/tests/framework"
)

// The tiering tests run herald serve against moto's S3 server with small
// log segments, a small local retention and a fast reconciler, so that a
// backlog of a few hundred KiB is tiered in seconds.
const (
	tierSegment   = 64 << 10  // --segment-size
	tierRetention = 128 << 10 // the topic's local_retention_bytes
	// tierLocalLimit is what a shard's local log may hold once tiering has
	// caught up: its retention, the segment being written, and the
	// segment the retention starts in.
	tierLocalLimit = tierRetention + 2*tierSegment
	// A backlog of 8 keys × 56 events of about 1.1 KiB is over three
	// times the local retention.
	tierKeys, tierPerKey = 8, 56
	tierPad              = 1024
)

// tierFlags are herald serve's flags for tiering to bucket, a cycle
// every interval.
func tierFlags(bucket *framework.TierBucket, interval string) []string {
	return []string{"--tier-url", bucket.URL, "--tier-interval", interval, "--segment-size", fmt.Sprint(tierSegment)}
}

// createTieredTopic creates a topic of one shard whose local retention is
// tierRetention.
func createTieredTopic(t *testing.T, c *client.Client, name string) {
	t.Helper()
	if _, err := c.CreateTopic(context.Background(), name, map[string]string{
		"shards": "1", "local_retention_bytes": fmt.Sprint(tierRetention)}); err != nil {
		t.Fatal(err)
	}
}

// paddedEvent is event seq of key with payload "key seq", as
// checkConsumedOnce reads it, and a header that makes it about 1 KiB.
func paddedEvent(key string, seq int) client.Event {
	return client.Event{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq), Headers: map[string]string{"pad": strings.Repeat("x", tierPad)}}
}

// paddedNumber is event seq of key with payload seq, a JSON number as
// framework.Webhook reads it, padded like paddedEvent.
func paddedNumber(key string, seq int) client.Event {
	return client.Event{Key: key, Payload: fmt.Append(nil, seq), Headers: map[string]string{"pad": strings.Repeat("x", tierPad)}}
}

// publishBacklog publishes perKey events for each of tierKeys keys, one
// of each key per request, numbering each key's from first, and returns
// what was acknowledged.
func publishBacklog(t *testing.T, c *client.Client, topic string, first, perKey int, event func(key string, seq int) client.Event) []framework.Published {
	t.Helper()
	var acked []framework.Published
	for seq := first; seq < first+perKey; seq++ {
		evs := make([]client.Event, tierKeys)
		for k := range evs {
			evs[k] = event(fmt.Sprint("k", k), seq)
		}
		ids, err := c.Publish(context.Background(), topic, evs...)
		if err != nil {
			t.Fatalf("publish events %d: %v", seq, err)
		}
		for k, id := range ids {
			acked = append(acked, framework.Published{Key: fmt.Sprint("k", k), Seq: seq, ID: id})
		}
	}
	return acked
}

// shardStats returns the stats of the topic's only shard as c's node
// sees them.
func shardStats(t *testing.T, c *client.Client, topic string) client.ShardStats {
	t.Helper()
	st, err := c.TopicStats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Shards) != 1 {
		t.Fatalf("topic %s has %d shards, want 1", topic, len(st.Shards))
	}
	return st.Shards[0]
}

// waitTiered waits until c's node says that the topic's shard is tiered:
// its LRO is at least lro, its local log within tierLocalLimit, the
// store holds some of it, and the last cycle went well. It returns the
// shard's stats then.
func waitTiered(t *testing.T, c *client.Client, topic string, lro uint64) client.ShardStats {
	t.Helper()
	var st client.ShardStats
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st = shardStats(t, c, topic)
		if st.LRO >= lro && st.LocalBytes <= tierLocalLimit && st.TieredBytes > 0 && st.TierError == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backlog is not tiered after two minutes (LRO %d, want %d; %d bytes local, limit %d): %+v", st.LRO, lro, st.LocalBytes, tierLocalLimit, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("tiered: LRO %d, %d bytes local, %d bytes in the store", st.LRO, st.LocalBytes, st.TieredBytes)
	return st
}

// checkBucket checks the objects of the bucket against the manifest as
// the stats show it: that no entry was uploaded twice, and that the runs
// of the objects except those in orphans add up to the shard's tiered
// bytes, that is, that the manifest records exactly those objects.
func checkBucket(t *testing.T, objs []framework.TierObject, orphans map[string]bool, st client.ShardStats) {
	t.Helper()
	type span struct {
		object      string
		first, last uint64
	}
	spans := map[string][]span{}
	for _, o := range objs {
		if orphans[o.Name] {
			continue
		}
		for _, r := range o.Runs {
			for _, s := range spans[r.Shard] {
				if r.First <= s.last && s.first <= r.Last {
					t.Errorf("entries %d to %d of %s are in %s and, %d to %d, in %s: uploaded twice", r.First, r.Last, r.Shard, o.Name, s.first, s.last, s.object)
				}
			}
			spans[r.Shard] = append(spans[r.Shard], span{o.Name, r.First, r.Last})
		}
	}
	if recorded := recordedBytes(objs, orphans); recorded != int64(st.TieredBytes) {
		t.Errorf("the bucket's objects (but %d orphans) hold runs of %d bytes; the manifest records %d bytes", len(orphans), recorded, st.TieredBytes)
	}
}

// checkSettledBucket checks the bucket against the manifest of the
// topic's shard as c's node shows it (checkBucket), once the two agree
// or 30 seconds have passed, and returns what it checked. The reconciler
// goes on while a test looks: a cycle may upload an object after the
// test read the stats and record it a moment later. Listing the bucket
// before reading the stats sees every object the stats record; an
// object never recorded, or entries uploaded twice, still fail the test.
// orphans says which of the objects the manifest need not record.
func checkSettledBucket(t *testing.T, bucket *framework.TierBucket, c *client.Client, topic string, orphans func([]framework.TierObject, client.ShardStats) map[string]bool) ([]framework.TierObject, client.ShardStats) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		objs := bucket.Objects(t)
		st := shardStats(t, c, topic)
		var skip map[string]bool
		if orphans != nil {
			skip = orphans(objs, st)
		}
		if recordedBytes(objs, skip) == int64(st.TieredBytes) || time.Now().After(deadline) {
			checkBucket(t, objs, skip, st)
			return objs, st
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recordedBytes returns the bytes of the runs of objs but those in skip.
func recordedBytes(objs []framework.TierObject, skip map[string]bool) int64 {
	var n int64
	for _, o := range objs {
		if !skip[o.Name] {
			n += objectBytes(o)
		}
	}
	return n
}

// objectBytes returns the bytes of o's runs.
func objectBytes(o framework.TierObject) int64 {
	var n int64
	for _, r := range o.Runs {
		n += r.Length
	}
	return n
}

// tierReads returns herald_tier_reads_total of the server at addr: how
// many runs it read from the object store.
func tierReads(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "herald_tier_reads_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("herald_tier_reads_total %q: %v", v, err)
			}
			return int(n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("%s/metrics has no herald_tier_reads_total", addr)
	return 0
}

// TestE2ETierBacklogPull publishes a backlog of three times a topic's
// local retention with no consumer: the shard's local log shrinks back to
// about its retention, the bucket holds the rest, and a consumer that
// comes then gets every event once, each key's in order, the oldest read
// back from the bucket. Once they are all acknowledged, the reconciler
// deletes the objects nobody needs any more.
func TestE2ETierBacklogPull(t *testing.T) {
	bucket := framework.NewTierBucket(t, testkit.StartMoto(t), "backlog")
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr, tierFlags(bucket, "200ms")...)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	createTieredTopic(t, c, "orders")

	// The backlog grows in three steps, each about the local retention:
	// after each, the local log is back within its limit.
	var acked []framework.Published
	var st client.ShardStats
	for i := range 3 {
		acked = append(acked, publishBacklog(t, c, "orders", i*tierPerKey/3, tierPerKey/3, paddedEvent)...)
		st = waitTiered(t, c, "orders", st.LRO+1)
	}
	if st.Bytes < 3*tierRetention {
		t.Fatalf("the backlog is %d bytes, not three times the local retention (%d)", st.Bytes, tierRetention)
	}
	// The log's newest entries may still be held in memory, which
	// local_bytes does not count, until the shard goes quiet.
	framework.WaitWithin(t, 30*time.Second, "the log, local and in the store, to hold the bytes of the events pending", func() bool {
		st = shardStats(t, c, "orders")
		return st.LocalBytes+st.TieredBytes >= st.Bytes
	})
	checkSettledBucket(t, bucket, c, "orders", nil)

	drainConsumedOnce(t, c, "orders", acked)
	if n := tierReads(t, addr); n == 0 {
		t.Error("the consumer got the backlog without a read from the store: nothing was below the local log")
	}
	framework.WaitWithin(t, time.Minute, "the reconciler to delete the objects no shard needs", func() bool { return len(bucket.Objects(t)) == 0 })
}

// TestE2ETierBacklogPush is TestE2ETierBacklogPull with a push
// subscription whose endpoint is down while the backlog builds and is
// tiered, and while the server is SIGKILLed and restarted: when the
// endpoint comes back it gets every event once, each key's in order.
// (A dispatcher holds up to 16 MiB of events in memory, the whole of
// this backlog: the restart makes it read them again, the oldest from the
// store.)
func TestE2ETierBacklogPush(t *testing.T) {
	hook := framework.NewWebhook(t)
	bucket := framework.NewTierBucket(t, testkit.StartMoto(t), "push")
	dataDir, addr := t.TempDir(), testkit.FreeAddr(t)
	srv := framework.StartServer(t, dataDir, addr, tierFlags(bucket, "200ms")...)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	ctx := context.Background()
	createTieredTopic(t, c, "orders")
	if _, err := c.CreateSubscription(ctx, "orders", "hook", map[string]string{"push_endpoint": hook.URL, "retry_sleep_duration": "0"}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSubscription(ctx, "orders", "default"); err != nil {
		t.Fatal(err)
	}

	acked := publishBacklog(t, c, "orders", 0, tierPerKey, paddedNumber)
	st := waitTiered(t, c, "orders", 1)
	// The default subscription is gone, so the shard's pending bytes say
	// nothing: its log's do. Its newest entries may still be held in
	// memory (written behind, under the WAL), which local_bytes, the
	// segment files' size, does not count; the shard writes them out when
	// it goes quiet.
	framework.WaitWithin(t, 30*time.Second, "the backlog's log to reach three times the local retention, local and in the store", func() bool {
		st = shardStats(t, c, "orders")
		return st.LocalBytes+st.TieredBytes >= 3*tierRetention
	})
	checkSettledBucket(t, bucket, c, "orders", nil)
	srv.Kill()
	framework.StartServer(t, dataDir, addr, tierFlags(bucket, "200ms")...)
	if hook.Arrived() > 0 {
		t.Fatalf("%d events arrived at a closed webhook", hook.Arrived())
	}

	hook.Open()
	framework.WaitWithin(t, 2*time.Minute, "the webhook to get the backlog", func() bool { return hook.Arrived() >= len(acked) })
	// Nothing was delivered before the kill: a duplicate is a bug.
	hook.Check(t, "hook", acked, 0)
	if n := tierReads(t, addr); n == 0 {
		t.Error("the webhook got the backlog without a read from the store: nothing was below the local log")
	}
}

// TestE2ETierCrashBetweenSteps builds a backlog, restarts the server
// with serve's HERALD_TEST_TIER_CRASH_AFTER so that it SIGKILLs itself
// right after a step of its first tiering cycle, and restarts it again
// without: nothing acknowledged is lost and a consumer gets every event
// once, in order per key. After the upload, the object is an orphan the
// manifest does not record and nothing reads; after the record, the
// object is not uploaded again, as the next cycle advances the LRO to
// it; after the advance, the next cycle goes on from there.
func TestE2ETierCrashBetweenSteps(t *testing.T) {
	endpoint := testkit.StartMoto(t)
	for _, step := range []string{"upload", "record", "advance"} {
		t.Run(step, func(t *testing.T) {
			bucket := framework.NewTierBucket(t, endpoint, "crash-"+step)
			dataDir, addr := t.TempDir(), testkit.FreeAddr(t)
			c := client.New("http://"+addr, client.WithTimeout(10*time.Second))

			// A reconciler whose cycles are an hour apart runs its first
			// at the start, when there is nothing to tier, and no other
			// while the backlog builds.
			srv := framework.StartServer(t, dataDir, addr, tierFlags(bucket, "1h")...)
			createTieredTopic(t, c, "orders")
			acked := publishBacklog(t, c, "orders", 0, tierPerKey, paddedEvent)
			if st := shardStats(t, c, "orders"); st.LRO != 0 || st.TieredBytes != 0 {
				t.Fatalf("tiered before the crash test began: %+v", st)
			}
			if err := srv.Stop(30 * time.Second); err != nil {
				t.Fatal(err)
			}

			crashing := framework.LaunchServer(t, []string{"HERALD_TEST_TIER_CRASH_AFTER=" + step}, dataDir, addr, tierFlags(bucket, "200ms")...)
			waitKilled(t, crashing)
			before := bucket.Objects(t)
			if len(before) == 0 {
				t.Fatalf("killed after the %s step with no object in the bucket", step)
			}
			t.Logf("killed after the %s step; the bucket holds %d objects", step, len(before))

			framework.StartServer(t, dataDir, addr, tierFlags(bucket, "200ms")...)
			var lastBefore uint64
			for _, o := range before {
				for _, r := range o.Runs {
					lastBefore = max(lastBefore, r.Last)
				}
			}
			waitTiered(t, c, "orders", lastBefore)
			if step != "advance" && len(before) != 1 {
				t.Fatalf("killed after the first %s, the bucket holds %d objects, want 1", step, len(before))
			}
			// Killed after the upload, the one object in the bucket is
			// still there (the sweep waits an hour), and its entries were
			// uploaded again in another: it is an orphan.
			var orphans map[string]bool
			if step == "upload" {
				orphans = map[string]bool{before[0].Name: true}
			}
			after, _ := checkSettledBucket(t, bucket, c, "orders", func([]framework.TierObject, client.ShardStats) map[string]bool { return orphans })
			names := map[string]bool{}
			for _, o := range after {
				names[o.Name] = true
			}
			for _, o := range before {
				if !names[o.Name] {
					t.Fatalf("object %s, there when the server was killed after the %s step, is gone from the bucket", o.Name, step)
				}
			}
			switch step {
			case "upload":
				// Nothing may read the orphan: with it gone, the consumer
				// still gets every event.
				bucket.Delete(t, before[0].Name)
			case "record":
				// The recorded object was not uploaded again: the objects
				// made since hold only entries after it (checkBucket).
				t.Logf("%d objects after the restart, the recorded one among them", len(after))
			}

			drainConsumedOnce(t, c, "orders", acked)
			if n := tierReads(t, addr); n == 0 {
				t.Error("the consumer got the backlog without a read from the store: nothing was below the local log")
			}
		})
	}
}

// exited reports whether s has exited.
func exited(s *heraldproc.Server) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// waitKilled waits for s to SIGKILL itself.
func waitKilled(t *testing.T, s *heraldproc.Server) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(2 * time.Minute):
		t.Fatalf("herald serve did not kill itself within two minutes\n%s", s.Output())
	}
	var ws syscall.WaitStatus
	if ee, ok := s.Err().(*exec.ExitError); ok {
		ws, _ = ee.Sys().(syscall.WaitStatus)
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("herald serve exited (%v), not killed by itself\n%s", s.Err(), s.Output())
	}
}

// TestE2ETierClusterLeaderKill runs three nodes that tier to one bucket.
// The shard's leader kills itself right after recording its first
// object (serve's HERALD_TEST_TIER_CRASH_AFTER): the new leader carries
// on from the manifest, advancing to the recorded object without
// uploading it again. Then, back, the first node leads and tiers again
// and is SIGKILLed, while the backlog grows through the others; the next
// leader carries on again. No entry is ever uploaded twice, and a
// consumer gets every acknowledged event once, each key's in order.
func TestE2ETierClusterLeaderKill(t *testing.T) {
	bucket := framework.NewTierBucket(t, testkit.StartMoto(t), "cluster")
	c := startClusterWith(t, 3, tierFlags(bucket, "200ms")...)
	createTieredTopic(t, c.client(0), "orders")
	// status returns the shard as node via sees it once it has a leader
	// other than node not (-1: any).
	status := func(via, not int) client.ClusterShard {
		var sh client.ClusterShard
		framework.WaitWithin(t, time.Minute, "the shard to have a leader", func() bool {
			st, err := c.client(via).ClusterStatus(context.Background())
			if err != nil {
				return false
			}
			for _, s := range st.Shards {
				if s.Topic == "orders" {
					sh = s
				}
			}
			return sh.Leader != 0 && int(sh.Leader) != not+1
		})
		return sh
	}

	// The shard's preferred leader, p, comes back from a restart set to
	// kill itself after its first record; the balancer hands it the
	// shard's leadership back.
	p := int(status(0, -1).PreferredLeader) - 1
	other := (p + 1) % 3
	if err := c.nodes[p].Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	crashing := c.launch(p, "HERALD_TEST_TIER_CRASH_AFTER=record")
	framework.WaitWithin(t, time.Minute, fmt.Sprintf("node %d to lead the shard again", p+1), func() bool {
		if exited(crashing) {
			t.Fatalf("node %d exited before it led the shard: %v\n%s", p+1, crashing.Err(), crashing.Output())
		}
		return int(status(other, -1).Leader) == p+1
	})

	// Published through another node, the backlog survives the leader's
	// death halfway: the client retries through the election. It grows
	// until p has recorded an object and died, however long that takes:
	// should the leadership move while p waits for closed segments to
	// tier, the next leader tiers everything there is, and p, the
	// leader again, has something to tier only once more is published.
	pub := c.client(other)
	var acked []framework.Published
	deadline := time.Now().Add(3 * time.Minute)
	for seq := 0; !exited(crashing); seq += tierPerKey / 4 {
		if time.Now().After(deadline) {
			t.Fatalf("node %d did not record an object and kill itself within three minutes of publishing\n%s", p+1, crashing.Output())
		}
		acked = append(acked, publishBacklog(t, pub, "orders", seq, tierPerKey/4, paddedEvent)...)
	}
	waitKilled(t, crashing)
	// The new leader may have tiered more of the backlog already; the
	// dead node's one object is there too.
	var recorded []framework.TierObject
	for _, o := range bucket.Objects(t) {
		if strings.HasPrefix(o.Name, fmt.Sprintf("herald/%d/", p+1)) {
			recorded = append(recorded, o)
		}
	}
	if len(recorded) != 1 {
		t.Fatalf("node %d killed itself having recorded its first object, and the bucket holds %d of its objects", p+1, len(recorded))
	}
	var through uint64
	for _, r := range recorded[0].Runs {
		through = max(through, r.Last)
	}
	next := int(status(other, p).Leader) - 1
	waitTiered(t, c.client(next), "orders", through)
	_, st := checkSettledBucket(t, bucket, c.client(next), "orders", nil)
	t.Logf("node %d recorded entries up to %d and died; node %d carried on to LRO %d", p+1, through, next+1, st.LRO)

	// Back without the crash, p leads and tiers again; SIGKILLed while
	// the backlog grows, it leaves the shard to a third leader.
	var err error
	if c.nodes[p], err = c.tryStart(p); err != nil {
		t.Fatalf("restart node %d: %v", p+1, err)
	}
	seq := len(acked) / tierKeys
	acked = append(acked, publishBacklog(t, pub, "orders", seq, tierPerKey/2, paddedEvent)...)
	lead := int(status(other, -1).Leader) - 1
	st = waitTiered(t, c.client(lead), "orders", st.LRO+1)
	c.nodes[lead].Kill()
	var through2 uint64
	for _, o := range bucket.Objects(t) {
		for _, r := range o.Runs {
			through2 = max(through2, r.Last)
		}
	}
	// A whole backlog more: the newest 256 KiB of a log are held in
	// memory before they reach its segments (host's WriteBehind), and only
	// closed segments are tiered.
	via := (lead + 1) % 3
	acked = append(acked, publishBacklog(t, c.client(via), "orders", seq+tierPerKey/2, tierPerKey, paddedEvent)...)
	next = int(status(via, lead).Leader) - 1
	waitTiered(t, c.client(next), "orders", through2+1)
	_, st = checkSettledBucket(t, bucket, c.client(next), "orders", func(objs []framework.TierObject, st client.ShardStats) map[string]bool {
		return killedUpload(objs, lead+1, st)
	})
	t.Logf("node %d led and was killed; node %d carried on to LRO %d", lead+1, next+1, st.LRO)

	drainConsumedOnce(t, c.client(next), "orders", acked)
}

// killedUpload returns, as checkBucket's orphans, the object a node
// SIGKILLed while it tiered uploaded but had not recorded yet, if there is
// one: the node's object whose bytes are what the bucket holds beyond
// what the manifest records (st). A node has one upload in flight at
// most, and such an object is never read (TestE2ETierCrashBetweenSteps).
func killedUpload(objs []framework.TierObject, node int, st client.ShardStats) map[string]bool {
	extra := recordedBytes(objs, nil) - int64(st.TieredBytes)
	if extra <= 0 {
		return nil
	}
	for _, o := range objs {
		if strings.HasPrefix(o.Name, fmt.Sprintf("herald/%d/", node)) && objectBytes(o) == extra {
			return map[string]bool{o.Name: true}
		}
	}
	return nil // checkBucket says what does not add up
}

// launch starts node i again with env added to its environment, and
// waits until it answers, unless it exits first.
func (c *cluster) launch(i int, env ...string) *heraldproc.Server {
	t := c.t
	t.Helper()
	args := append([]string{"--node-id", fmt.Sprint(i + 1), "--peers", c.peers}, c.extra...)
	s := framework.LaunchServer(t, env, c.dirs[i], c.addrs[i], args...)
	c.nodes[i] = s
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Wait(ctx); err != nil {
		t.Fatalf("node %d: %v\n%s", i+1, err, s.Output())
	}
	return s
}

// TestE2ETierStoreOutage cuts the server off from its object store while
// a backlog grows: the failing uploads are retried, the shard's stats say
// why tiering is stuck, and nothing not uploaded and recorded leaves the
// local disk. Once the store is back, tiering catches up on its own and a
// consumer gets every event once, each key's in order.
func TestE2ETierStoreOutage(t *testing.T) {
	moto := testkit.StartMoto(t)
	proxy, err := faultproxy.Listen(testkit.FreeAddr(t), strings.TrimPrefix(moto, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	bucket := framework.NewTierBucket(t, "http://"+proxy.Addr(), "outage")
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr, tierFlags(bucket, "200ms")...)
	c := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	createTieredTopic(t, c, "orders")

	acked := publishBacklog(t, c, "orders", 0, tierPerKey/3, paddedEvent)
	before := waitTiered(t, c, "orders", 1)

	proxy.Cut()
	acked = append(acked, publishBacklog(t, c, "orders", tierPerKey/3, 2*tierPerKey/3, paddedEvent)...)
	var st client.ShardStats
	framework.WaitWithin(t, time.Minute, "the stats to say that tiering fails", func() bool {
		st = shardStats(t, c, "orders")
		return st.TierError != ""
	})
	t.Logf("while the store is cut off: %s", st.TierError)
	if st.LRO > before.LRO+1 {
		// One cycle may have been past its upload when the store went.
		t.Errorf("the LRO moved from %d to %d while the store was cut off", before.LRO, st.LRO)
	}
	if st.LocalBytes+before.TieredBytes < st.Bytes {
		t.Errorf("%d bytes local and %d in the store hold less than the %d bytes pending: the node deleted what it had not uploaded", st.LocalBytes, before.TieredBytes, st.Bytes)
	}

	proxy.Heal()
	st = waitTiered(t, c, "orders", st.LRO+1)
	if st.LocalBytes > tierLocalLimit {
		t.Errorf("%d bytes local once the store is back, want at most %d", st.LocalBytes, tierLocalLimit)
	}
	drainConsumedOnce(t, c, "orders", acked)
}

// TestE2ETierDamagedObjectReadFromAReplica damages every object of a
// shard in the bucket: the shard's leader, which keeps little of its log
// locally, reads each entry it needs from another replica that still
// holds it (they keep more), and a consumer gets every event once, in
// order; the leader says which object was damaged.
func TestE2ETierDamagedObjectReadFromAReplica(t *testing.T) {
	bucket := framework.NewTierBucket(t, testkit.StartMoto(t), "damaged")
	c := startClusterWith(t, 3, append(tierFlags(bucket, "200ms"), "--tier-local-retention", "1073741824")...)
	if _, err := c.client(0).CreateTopic(context.Background(), "orders", map[string]string{"shards": "1"}); err != nil {
		t.Fatal(err)
	}
	// The shard's preferred leader comes back keeping only tierRetention
	// of its log; the balancer hands it the leadership back.
	var sh client.ClusterShard
	leader := func(via int) client.ClusterShard {
		st, err := c.client(via).ClusterStatus(context.Background())
		if err != nil {
			return client.ClusterShard{}
		}
		for _, s := range st.Shards {
			if s.Topic == "orders" {
				return s
			}
		}
		return client.ClusterShard{}
	}
	framework.WaitWithin(t, time.Minute, "the shard to have a leader", func() bool { sh = leader(0); return sh.Leader != 0 })
	p := int(sh.PreferredLeader) - 1
	other := (p + 1) % 3
	if err := c.nodes[p].Stop(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.extra = append(slices.Clone(c.extra), "--tier-local-retention", fmt.Sprint(tierRetention))
	c.launch(p)
	framework.WaitWithin(t, time.Minute, fmt.Sprintf("node %d to lead the shard again", p+1), func() bool { return int(leader(other).Leader) == p+1 })

	acked := publishBacklog(t, c.client(other), "orders", 0, tierPerKey, paddedEvent)
	waitTiered(t, c.client(p), "orders", 1)
	// The leader deletes the tiered part of its log beyond its retention
	// once the log is written out (the newest entries are held in memory
	// first) and a snapshot lets it: until its disk no longer holds the
	// oldest object's first entry, the consumer would read it there.
	objs := bucket.Objects(t)
	oldest := objs[0]
	for _, o := range objs {
		if firstIndex(o) < firstIndex(oldest) {
			oldest = o
		}
	}
	framework.WaitWithin(t, time.Minute, fmt.Sprintf("node %d's disk to no longer hold entry %d", p+1, firstIndex(oldest)), func() bool {
		return shardStats(t, c.client(p), "orders").LocalFirst > firstIndex(oldest)
	})
	for _, o := range bucket.Objects(t) {
		bucket.Damage(t, o)
	}

	drainConsumedOnce(t, c.client(p), "orders", acked)
	if out := c.nodes[p].Output(); !strings.Contains(out, "failed its checksum") || !strings.Contains(out, oldest.Name) {
		t.Errorf("node %d did not say that object %s was damaged:\n%s", p+1, oldest.Name, out)
	}
}

// firstIndex returns the first log index o holds.
func firstIndex(o framework.TierObject) uint64 {
	first := o.Runs[0].First
	for _, r := range o.Runs {
		first = min(first, r.First)
	}
	return first
}
