package load

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Config shapes a load: how many producers publish, what they publish and
// when the run stops.
type Config struct {
	// Producers publish concurrently, each waiting for one batch to be
	// acknowledged before it sends the next.
	Producers int `json:"producers"`
	// Batch is the number of events per publish: one request for herald;
	// for the peers, Batch messages sent before waiting for their acks.
	Batch int `json:"batch"`
	// EventBytes is the size of each event's payload.
	EventBytes int `json:"event_bytes"`
	// Keys is the number of distinct keys; each event takes one at random.
	Keys int `json:"keys"`
	// KeyPerBatch gives all the events of a batch one key, picked at
	// random for each batch: a batch then goes to one shard.
	KeyPerBatch bool `json:"key_per_batch,omitempty"`
	// Duration ends the measured run after this long (0: no time limit).
	Duration time.Duration `json:"-"`
	// Count ends the measured run after this many events (0: no limit).
	// With both Duration and Count, the first reached ends the run.
	Count int64 `json:"count"`
	// Warmup is a period of load before the measured run whose events are
	// not counted.
	Warmup time.Duration `json:"-"`
	// ServerPIDs are the system's server processes whose CPU time the run
	// measures over the measured interval (Result.ServerCPU); none: not
	// measured.
	ServerPIDs string `json:"-"`
}

// DefaultConfig returns the defaults of the command-line flags.
func DefaultConfig() Config {
	return Config{
		Producers:  64,
		Batch:      1,
		EventBytes: 1024,
		Keys:       1024,
		Duration:   10 * time.Second,
	}
}

// AddFlags defines the load flags on fs, with c's values as defaults. Call
// Resolve after parsing.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.Producers, "producers", c.Producers, "concurrent producers, each waiting for its batch's acknowledgement before sending the next")
	fs.IntVar(&c.Batch, "batch", c.Batch, "events per publish (a request; for peers: messages sent before waiting for their acks)")
	addEventFlags(fs, &c.EventBytes, &c.Keys)
	fs.BoolVar(&c.KeyPerBatch, "key-per-batch", c.KeyPerBatch, "give all the events of a batch one key (picked at random per batch), so that each batch goes to one shard")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "measure for this long (with --count only: no time limit)")
	fs.Int64Var(&c.Count, "count", c.Count, "measure this many events, then stop (0: no count limit)")
	fs.DurationVar(&c.Warmup, "warmup", c.Warmup, "load before the measured run, not counted")
	addServerPIDsFlag(fs, &c.ServerPIDs)
}

// addEventFlags defines the flags of the events' shape, shared by the
// publish and the consumption runs.
func addEventFlags(fs *pflag.FlagSet, eventBytes, keys *int) {
	fs.IntVar(eventBytes, "event-bytes", *eventBytes, "payload size of each event in bytes")
	fs.IntVar(keys, "keys", *keys, "key cardinality: events take one of this many keys at random")
}

// Resolve applies the rule that --count alone, without --duration, means
// no time limit, then checks c.
func (c *Config) Resolve(fs *pflag.FlagSet) error {
	if fs.Changed("count") && !fs.Changed("duration") {
		c.Duration = 0
	}
	return c.Validate()
}

// Validate reports the first setting that makes no sense.
func (c *Config) Validate() error {
	switch {
	case c.Producers < 1:
		return fmt.Errorf("--producers %d: want at least 1", c.Producers)
	case c.Batch < 1:
		return fmt.Errorf("--batch %d: want at least 1", c.Batch)
	case c.EventBytes < 0:
		return fmt.Errorf("--event-bytes %d: want 0 or more", c.EventBytes)
	case c.Keys < 1:
		return fmt.Errorf("--keys %d: want at least 1", c.Keys)
	case c.Duration < 0:
		return fmt.Errorf("--duration %v: want a positive duration", c.Duration)
	case c.Count < 0:
		return fmt.Errorf("--count %d: want 0 or more", c.Count)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup %v: want 0 or a positive duration", c.Warmup)
	case c.Duration == 0 && c.Count == 0:
		return errors.New("give --duration or --count: the run needs an end")
	}
	_, err := parsePIDs(c.ServerPIDs)
	return err
}

// configJSON is Config with its durations as strings such as "20s".
type configJSON struct {
	plainConfig
	Duration string `json:"duration,omitempty"`
	Warmup   string `json:"warmup,omitempty"`
}

type plainConfig Config

// MarshalJSON writes durations as Go duration strings.
func (c Config) MarshalJSON() ([]byte, error) {
	j := configJSON{plainConfig: plainConfig(c)}
	if c.Duration > 0 {
		j.Duration = c.Duration.String()
	}
	if c.Warmup > 0 {
		j.Warmup = c.Warmup.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Config) UnmarshalJSON(data []byte) error {
	var j configJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*c = Config(j.plainConfig)
	var err error
	if j.Duration != "" {
		if c.Duration, err = time.ParseDuration(j.Duration); err != nil {
			return fmt.Errorf("duration: %w", err)
		}
	}
	if j.Warmup != "" {
		if c.Warmup, err = time.ParseDuration(j.Warmup); err != nil {
			return fmt.Errorf("warmup: %w", err)
		}
	}
	return nil
}
