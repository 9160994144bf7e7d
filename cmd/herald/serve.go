package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"herald/internal/api"
	"herald/internal/node"
)

// serveConfig is every setting of `herald serve`. Each can come from a flag,
// an environment variable (HERALD_ + the upper-cased yaml name) or the
// config file, in that order of precedence, over the defaults below.
type serveConfig struct {
	DataDir             string        `yaml:"data_dir"`
	Listen              string        `yaml:"listen"`
	MaxPayloadBytes     int           `yaml:"max_payload_bytes"`
	ReservationTimeout  time.Duration `yaml:"reservation_timeout"`
	SnapshotEntries     uint64        `yaml:"snapshot_entries"`
	SyncSnapshots       bool          `yaml:"sync_snapshots"`
	DeliveryConcurrency int           `yaml:"delivery_concurrency"`
	ShutdownTimeout     time.Duration `yaml:"shutdown_timeout"`
	LogLevel            string        `yaml:"log_level"`
}

func defaultServeConfig() serveConfig {
	return serveConfig{
		DataDir:             "herald-data",
		Listen:              "127.0.0.1:7600",
		MaxPayloadBytes:     node.DefaultMaxPayloadBytes,
		ReservationTimeout:  30 * time.Second,
		SnapshotEntries:     10000,
		DeliveryConcurrency: 16,
		ShutdownTimeout:     30 * time.Second,
		LogLevel:            "info",
	}
}

func newServeCommand() *cobra.Command {
	cfg := defaultServeConfig()
	var configFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a herald node",
		Long: `Run a herald node: a single node stores its data in --data-dir and serves
the API (gRPC, gRPC-Web and JSON over HTTP), Prometheus /metrics, /healthz and
/readyz on --listen.

Settings come from flags, then environment variables (HERALD_DATA_DIR,
HERALD_LISTEN, HERALD_MAX_PAYLOAD_BYTES, HERALD_RESERVATION_TIMEOUT,
HERALD_SNAPSHOT_ENTRIES, HERALD_SYNC_SNAPSHOTS, HERALD_DELIVERY_CONCURRENCY,
HERALD_SHUTDOWN_TIMEOUT,
HERALD_LOG_LEVEL), then a YAML config file (--config) with the same names in
snake_case, then the defaults.

SIGTERM or SIGINT stops accepting requests, lets those in flight finish (up to
--shutdown-timeout) and exits cleanly.`,
		Example: `  herald serve
  herald serve --data-dir /var/lib/herald --listen 0.0.0.0:7600
  HERALD_LISTEN=127.0.0.1:8600 herald serve --config herald.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := resolveServeConfig(cmd, &cfg, configFile); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return serve(ctx, cfg, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML config file")
	f.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for all of the node's data")
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "address for the API, metrics and health checks")
	f.IntVar(&cfg.MaxPayloadBytes, "max-payload-bytes", cfg.MaxPayloadBytes, "largest event payload accepted")
	f.DurationVar(&cfg.ReservationTimeout, "reservation-timeout", cfg.ReservationTimeout, "reservations not committed within this time expire")
	f.Uint64Var(&cfg.SnapshotEntries, "snapshot-entries", cfg.SnapshotEntries, "snapshot a shard after this many log entries")
	f.BoolVar(&cfg.SyncSnapshots, "sync-snapshots", cfg.SyncSnapshots, "write snapshots on the apply loop (slower; for comparison)")
	f.IntVar(&cfg.DeliveryConcurrency, "delivery-concurrency", cfg.DeliveryConcurrency, "concurrent pushes per shard (events of one key are always pushed one at a time)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", cfg.ShutdownTimeout, "how long in-flight requests may take on shutdown")
	f.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	return cmd
}

// resolveServeConfig layers the config file and the environment under the
// flags the user set.
func resolveServeConfig(cmd *cobra.Command, cfg *serveConfig, configFile string) error {
	merged := defaultServeConfig()
	if configFile != "" {
		data, err := os.ReadFile(configFile)
		if err != nil {
			return fmt.Errorf("read config file: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(data)))
		dec.KnownFields(true)
		if err := dec.Decode(&merged); err != nil {
			return fmt.Errorf("config file %s: %w (settings are snake_case, e.g. data_dir: /var/lib/herald)", configFile, err)
		}
	}
	if err := applyEnv(&merged); err != nil {
		return err
	}
	// Flags the user set win; copy them over what the file and env gave.
	flagged := *cfg
	v, fv := reflect.ValueOf(&merged).Elem(), reflect.ValueOf(flagged)
	for i := range v.NumField() {
		if cmd.Flags().Changed(flagName(v.Type().Field(i))) {
			v.Field(i).Set(fv.Field(i))
		}
	}
	*cfg = merged
	return nil
}

func flagName(f reflect.StructField) string {
	return strings.ReplaceAll(f.Tag.Get("yaml"), "_", "-")
}

// applyEnv sets fields from HERALD_<NAME> variables.
func applyEnv(cfg *serveConfig) error {
	v := reflect.ValueOf(cfg).Elem()
	for i := range v.NumField() {
		name := "HERALD_" + strings.ToUpper(v.Type().Field(i).Tag.Get("yaml"))
		s, ok := os.LookupEnv(name)
		if !ok {
			continue
		}
		if err := setField(v.Field(i), s); err != nil {
			return fmt.Errorf("environment variable %s=%q: %w", name, s, err)
		}
	}
	return nil
}

func setField(f reflect.Value, s string) error {
	switch f.Interface().(type) {
	case string:
		f.SetString(s)
	case bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("want true or false")
		}
		f.SetBool(b)
	case time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("want a duration such as 30s")
		}
		f.SetInt(int64(d))
	case int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("want a whole number")
		}
		f.SetInt(int64(n))
	case uint64:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return errors.New("want a whole number")
		}
		f.SetUint(n)
	}
	return nil
}

func serve(ctx context.Context, cfg serveConfig, stderr interface{ Write([]byte) (int, error) }) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Listen first: a port in use should fail before any data is touched.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen on %s: the address is already in use (is another herald running?); stop it or pass --listen with a free address", cfg.Listen)
		}
		return fmt.Errorf("listen on %s: %w; pass --listen with an address this machine has", cfg.Listen, err)
	}
	defer ln.Close()

	start := time.Now()
	reg := prometheus.NewRegistry()
	n, err := node.Open(ctx, node.Config{
		DataDir:             cfg.DataDir,
		MaxPayloadBytes:     cfg.MaxPayloadBytes,
		ReservationTimeout:  cfg.ReservationTimeout,
		SnapshotEntries:     cfg.SnapshotEntries,
		SyncSnapshots:       cfg.SyncSnapshots,
		DeliveryConcurrency: cfg.DeliveryConcurrency,
		Logger:              logger,
		Registerer:          reg,
	})
	if err != nil {
		return err
	}
	defer n.Close()
	for name, err := range n.BrokenShards() {
		logger.Error("shard unavailable", "shard", name, "err", err)
	}

	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC without TLS
	srv := &http.Server{
		Handler:           api.Handler(n, reg),
		Protocols:         &protocols,
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("herald is serving", "listen", ln.Addr().String(), "data_dir", cfg.DataDir,
		"topics", len(n.ListTopics()), "boot", time.Since(start).Round(time.Millisecond))

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: finishing requests in flight", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Warn("requests still running at the shutdown timeout were cut off", "err", err)
	}
	if err := n.Close(); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}
