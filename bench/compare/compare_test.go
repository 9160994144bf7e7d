package compare

import (
	"net/http"
	"strings"
	"testing"
)

func TestSelect(t *testing.T) {
	all, err := Select(nil)
	if err != nil || len(all) != 5 {
		t.Fatalf("Select(nil): %d scenarios, %v; want 5", len(all), err)
	}
	got, err := Select([]string{"persistence", "shards"})
	if err != nil || len(got) != 3 || got[0].Name != "shards-1KiB" || got[2].Name != "persistence" {
		t.Errorf("Select(persistence, shards) = %+v, %v; want the shards scenarios, then persistence", got, err)
	}
	if _, err := Select([]string{"shards", "nosuch"}); err == nil ||
		!strings.Contains(err.Error(), `unknown scenario "nosuch": want one of shards, snapshots, persistence, or all`) {
		t.Errorf("unknown scenario: err = %v", err)
	}
}

func TestPushSinkCloseStopsServing(t *testing.T) {
	s, err := startPushSink()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.url, "http://127.0.0.1:") {
		t.Errorf("sink URL %s is not on loopback", s.url)
	}
	resp, err := http.Post(s.url, "application/json", strings.NewReader(`{"id":"t/0/0"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", resp.StatusCode)
	}
	if err := s.close(); err != nil {
		t.Errorf("close: %v", err)
	}
	// close returned only after Serve did: the port no longer answers.
	if resp, err := http.Post(s.url, "application/json", nil); err == nil {
		resp.Body.Close()
		t.Error("the sink still answers after close")
	}
}
