package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"herald/client"
	"herald/internal/testkit"
	"herald/tests/framework"
)

// TestE2EIdempotentPublishAcrossKill publishes batches that span shards,
// each event with a dedup id, SIGKILLs the server mid-load and restarts it
// while the publishers retry every failed batch with the same ids (half of
// them by hand, half through client.WithPublishRetries over a publish
// stream). In the end every
// event is stored exactly once, under the id its publisher was given.
func TestE2EIdempotentPublishAcrossKill(t *testing.T) {
	dataDir := t.TempDir()
	addr := testkit.FreeAddr(t)
	srv := framework.StartServer(t, dataDir, addr)
	ctx := context.Background()
	plain := client.New("http://"+addr, client.WithTimeout(10*time.Second))
	// Over a publish stream, which every kill breaks.
	retrying := client.New("http://"+addr, client.WithTimeout(10*time.Second), client.WithPublishRetries(1000), client.WithPublishStream())
	defer retrying.Close()
	if _, err := plain.CreateTopic(ctx, "dedup", map[string]string{"shards": "4"}); err != nil {
		t.Fatal(err)
	}

	const publishers, batches, perBatch = 8, 60, 10
	var mu sync.Mutex
	idOf := map[string]string{} // payload -> id returned to its publisher
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for b := range batches {
				var evs []client.Event
				for j := range perBatch {
					payload := fmt.Sprintf("p%d-b%d-e%d", p, b, j)
					// Keys spread each batch over the shards.
					evs = append(evs, client.Event{Key: fmt.Sprintf("k%d", j), Payload: []byte(payload)})
				}
				var ids []string
				if p%2 == 0 {
					// By hand: the same dedup ids on every attempt.
					for j := range evs {
						evs[j].DedupID = string(evs[j].Payload)
					}
					for {
						var err error
						if ids, err = plain.Publish(ctx, "dedup", evs...); err == nil {
							break
						}
						time.Sleep(20 * time.Millisecond)
					}
				} else {
					var err error
					if ids, err = retrying.Publish(ctx, "dedup", evs...); err != nil {
						t.Errorf("publish with retries: %v", err)
						return
					}
				}
				mu.Lock()
				for j, id := range ids {
					idOf[string(evs[j].Payload)] = id
				}
				mu.Unlock()
			}
		})
	}

	for {
		mu.Lock()
		n := len(idOf)
		mu.Unlock()
		if n >= publishers*batches*perBatch/3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Kill()
	framework.StartServer(t, dataDir, addr)
	wg.Wait()
	if t.Failed() {
		return
	}

	byShard, unreadable := framework.DrainTopic(t, plain, "dedup")
	if len(unreadable) > 0 {
		t.Fatalf("shards unreadable after the restart: %v", unreadable)
	}
	seen := map[string]string{}
	for _, ds := range byShard {
		for _, d := range ds {
			payload := string(d.Payload)
			if prev, dup := seen[payload]; dup {
				t.Fatalf("event %q stored twice: as %s and %s", payload, prev, d.ID)
			}
			seen[payload] = d.ID
			if want := idOf[payload]; d.ID != want {
				t.Fatalf("event %q stored as %s, but its publisher was given %s", payload, d.ID, want)
			}
		}
	}
	if len(seen) != publishers*batches*perBatch {
		t.Fatalf("%d events stored, want %d", len(seen), publishers*batches*perBatch)
	}
}

// TestE2ESNSZonegroup: --sns-zonegroup names the zonegroup of the SNS API's
// topic ARNs, and ARNs of another zonegroup are refused.
func TestE2ESNSZonegroup(t *testing.T) {
	addr := testkit.FreeAddr(t)
	framework.StartServer(t, t.TempDir(), addr, "--sns-zonegroup", "zg-east")
	post := func(form url.Values) (int, string) {
		resp, err := http.PostForm("http://"+addr+"/", form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := post(url.Values{"Action": {"CreateTopic"}, "Name": {"fish"}})
	if status != http.StatusOK || !strings.Contains(body, "<TopicArn>arn:aws:sns:zg-east::fish</TopicArn>") {
		t.Fatalf("CreateTopic: %d %s", status, body)
	}
	status, body = post(url.Values{"Action": {"GetTopicAttributes"}, "TopicArn": {"arn:aws:sns:default::fish"}})
	if status != http.StatusBadRequest || !strings.Contains(body, "<Code>InvalidParameter</Code>") || !strings.Contains(body, "use arn:aws:sns:zg-east::fish") {
		t.Fatalf("GetTopicAttributes with another zonegroup: %d %s", status, body)
	}
}
