package main

import (
	"fmt"
	"io"
	"net/http"
	"time"
)

// waitReadyz waits until the node at addr (plain HTTP) answers /readyz
// with 200: every shard it had when it started has opened. Before that it
// serves, but its shards still opening refuse requests.
func waitReadyz(addr string, limit time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz of %s did not say ready within %s: %w", addr, limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
