package node

import "time"

// every calls f each period until stop is closed: the loop of the node's
// periodic jobs (reservation expiry, retention trims).
func every(stop <-chan struct{}, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		f()
	}
}
