package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newWaitCommand(g *globals) *cobra.Command {
	var ready bool
	cmd := &cobra.Command{
		Use:   "wait --ready",
		Short: "Wait until the server is ready",
		Long: `Wait until the server given by --server is ready: it has started, and
every shard it had has opened (its /readyz says ready). Until then it may not
answer at all (it has not opened its port yet), answer that it is starting
(in a cluster, until a majority of --peers is up), or refuse requests to the
shards still opening.

--timeout bounds the whole wait here (0: wait for ever); wait exits 1 if the
server is not ready by then, saying how far it got. For scripts that start
a server and then use it:

  herald serve & herald wait --ready && herald topic create orders`,
		Example: `  herald wait --ready
  herald --server http://127.0.0.1:7602 wait --ready --timeout 2m`,
		Args: nArgs(0, false),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !ready {
				return errors.New("say what to wait for: --ready")
			}
			ctx := cmd.Context()
			if g.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, g.timeout)
				defer cancel()
			}
			st, err := g.waitReady(ctx)
			if err != nil {
				return err
			}
			if g.json() {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "ready: %s open\n", count(st.ShardsOpen, "shard"))
			return err
		},
	}
	cmd.Flags().BoolVar(&ready, "ready", false, "wait until /readyz says ready")
	return cmd
}

// readiness is what /readyz says.
type readiness struct {
	Ready      bool `json:"ready"`
	Shards     int  `json:"shards"`
	ShardsOpen int  `json:"shardsOpen"`
}

// waitReady asks the server's /readyz until it says ready or ctx ends.
func (g *globals) waitReady(ctx context.Context) (readiness, error) {
	url := strings.TrimRight(g.server, "/") + "/readyz"
	if !strings.Contains(g.server, "://") {
		url = "http://" + url
	}
	hc := g.httpClient()
	hc.Transport = hc.Transport.(*waitStarting).next // it says it is starting: that is an answer here
	for {
		st, why := askReady(ctx, hc, url)
		if st.Ready {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("the server at %s is not ready after --timeout %v: %s", g.server, g.timeout, why)
		case <-time.After(startingPoll):
		}
	}
}

// askReady asks url (a /readyz) once, and says why the server is not
// ready if it is not.
func askReady(ctx context.Context, hc *http.Client, url string) (readiness, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return readiness{}, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return readiness{}, fmt.Sprintf("it does not answer (%v)", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var r struct {
		Ready      bool   `json:"ready"`
		Shards     int    `json:"shards"`
		ShardsOpen int    `json:"shards_open"`
		Message    string `json:"message"` // the starting node's error
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return readiness{}, fmt.Sprintf("it answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	st := readiness{Ready: r.Ready && resp.StatusCode == http.StatusOK, Shards: r.Shards, ShardsOpen: r.ShardsOpen}
	switch {
	case r.Message != "":
		return st, r.Message
	case !st.Ready:
		return st, fmt.Sprintf("%d of %d shards open", r.ShardsOpen, r.Shards)
	}
	return st, ""
}
