package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/providers/structs"
	"github.com/knadh/koanf/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"herald/internal/api"
	"herald/internal/api/sns"
	"herald/internal/dashboard"
	"herald/internal/host"
	"herald/internal/node"
	"herald/internal/transport"
)

// serveConfig is every setting of `herald serve`. Each can come from a flag
// (--data-dir), an environment variable (HERALD_DATA_DIR) or the config file
// (data_dir), in that order of precedence, over defaultServeConfig(); the
// yaml name of a field gives the other two. loadServeConfig reads them all
// for a field of any type, which TestServeConfigEveryFieldFromEverySource
// checks.
type serveConfig struct {
	DataDir             string        `yaml:"data_dir"`
	Listen              string        `yaml:"listen"`
	NodeID              uint64        `yaml:"node_id"`
	Peers               string        `yaml:"peers"`
	Join                bool          `yaml:"join"`
	MaxPayloadBytes     int           `yaml:"max_payload_bytes"`
	ReservationTimeout  time.Duration `yaml:"reservation_timeout"`
	SnapshotEntries     uint64        `yaml:"snapshot_entries"`
	Snapshots           bool          `yaml:"snapshots"`
	SegmentSize         int           `yaml:"segment_size"`
	DeliveryConcurrency int           `yaml:"delivery_concurrency"`
	ShutdownTimeout     time.Duration `yaml:"shutdown_timeout"`
	LogLevel            string        `yaml:"log_level"`
	TLSCertFile         string        `yaml:"tls_cert_file"`
	TLSKeyFile          string        `yaml:"tls_key_file"`
	PeerCAFile          string        `yaml:"peer_ca_file"`
	TokensFile          string        `yaml:"tokens_file"`
	InsecureNoAuth      bool          `yaml:"insecure_no_auth"`
	MetricsNeedToken    bool          `yaml:"metrics_need_token"`
	PushAllow           string        `yaml:"push_allow"`
	PushCADir           string        `yaml:"push_ca_dir"`
	DedupWindow         time.Duration `yaml:"dedup_window"`
	DiskFreeLimit       int           `yaml:"disk_free_limit"`
	SNSZonegroup        string        `yaml:"sns_zonegroup"`
	BootParallelism     int           `yaml:"boot_parallelism"`
	PprofListen         string        `yaml:"pprof_listen"`
	AlertWebhook        string        `yaml:"alert_webhook"`
	AlertSecret         string        `yaml:"alert_secret"`
	TierURL             string        `yaml:"tier_url"`
	TierParallelism     int           `yaml:"tier_parallelism"`
	TierInterval        time.Duration `yaml:"tier_interval"`
	TierLocalRetention  int64         `yaml:"tier_local_retention"`
	TierCacheBytes      int64         `yaml:"tier_cache_bytes"`
}

// defaultServeConfig is the one place serve's defaults come from: the flags'
// defaults in --help and the bottom layer of loadServeConfig.
func defaultServeConfig() serveConfig {
	n := node.DefaultConfig()
	return serveConfig{
		DataDir:             "herald-data",
		Listen:              "127.0.0.1:7600",
		NodeID:              n.NodeID,
		MaxPayloadBytes:     n.MaxPayloadBytes,
		ReservationTimeout:  n.ReservationTimeout,
		SnapshotEntries:     n.SnapshotEntries,
		Snapshots:           true,
		DeliveryConcurrency: n.DeliveryConcurrency,
		ShutdownTimeout:     30 * time.Second,
		LogLevel:            "info",
		DedupWindow:         n.DedupWindow,
		DiskFreeLimit:       int(n.DiskFreeLimit),
		SNSZonegroup:        sns.DefaultZonegroup,
		TierParallelism:     n.Tier.Parallelism,
		TierInterval:        n.Tier.Interval,
		TierLocalRetention:  n.Tier.LocalRetention,
		TierCacheBytes:      n.Tier.CacheBytes,
	}
}

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a herald node",
		Long: `Run a herald node: a single node stores its data in --data-dir and serves
the API (gRPC, gRPC-Web and JSON over HTTP), Prometheus /metrics, /healthz and
/readyz on --listen.

Settings come from flags, then environment variables (HERALD_DATA_DIR,
HERALD_LISTEN, HERALD_NODE_ID, HERALD_PEERS, HERALD_JOIN, HERALD_MAX_PAYLOAD_BYTES, HERALD_RESERVATION_TIMEOUT,
HERALD_SNAPSHOT_ENTRIES, HERALD_SNAPSHOTS, HERALD_SEGMENT_SIZE, HERALD_DELIVERY_CONCURRENCY,
HERALD_SHUTDOWN_TIMEOUT,
HERALD_LOG_LEVEL, HERALD_TLS_CERT_FILE, HERALD_TLS_KEY_FILE, HERALD_PEER_CA_FILE, HERALD_TOKENS_FILE,
HERALD_INSECURE_NO_AUTH, HERALD_METRICS_NEED_TOKEN, HERALD_PUSH_ALLOW,
HERALD_PUSH_CA_DIR, HERALD_DEDUP_WINDOW, HERALD_DISK_FREE_LIMIT, HERALD_SNS_ZONEGROUP, HERALD_BOOT_PARALLELISM,
HERALD_PPROF_LISTEN, HERALD_ALERT_WEBHOOK, HERALD_ALERT_SECRET, HERALD_TIER_URL, HERALD_TIER_PARALLELISM,
HERALD_TIER_INTERVAL, HERALD_TIER_LOCAL_RETENTION, HERALD_TIER_CACHE_BYTES), then a YAML config file (--config) with the same names in
snake_case, then the defaults.

Without --tokens-file, every caller may do everything, so herald then
listens only on a loopback address unless --insecure-no-auth is given.
Push endpoints may not reach loopback, private, link-local, multicast or
metadata addresses unless --push-allow names them.

SIGTERM or SIGINT stops accepting requests, lets those in flight finish (up to
--shutdown-timeout) and exits cleanly. SIGHUP reloads the tokens file and the
TLS certificate (which is also reloaded when its files change).`,
		Example: `  herald serve
  herald serve --data-dir /var/lib/herald --listen 0.0.0.0:7600 --tokens-file /etc/herald/tokens
  HERALD_LISTEN=127.0.0.1:8600 herald serve --config herald.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadServeConfig(cmd.Flags())
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return serve(ctx, cfg, cmd.ErrOrStderr())
		},
	}
	// The flags only declare; loadServeConfig reads those the user set.
	d := defaultServeConfig()
	f := cmd.Flags()
	f.String("config", "", "YAML config file")
	f.String("data-dir", d.DataDir, "directory for all of the node's data")
	f.String("listen", d.Listen, "address for the API, metrics and health checks (and, in a cluster, the other nodes)")
	f.Uint64("node-id", d.NodeID, "this node's id in --peers")
	f.String("peers", d.Peers, "every node of the cluster, this one included, as id=host:port,... (empty: a node alone)")
	f.Bool("join", d.Join, "join a running cluster that made this node a member (herald cluster add); --peers lists the cluster's nodes and this one")
	f.Int("max-payload-bytes", d.MaxPayloadBytes, "largest event payload accepted")
	f.Duration("reservation-timeout", d.ReservationTimeout, "reservations not committed within this time expire")
	f.Uint64("snapshot-entries", d.SnapshotEntries, "snapshot a shard after this many log entries")
	f.Bool("snapshots", d.Snapshots, "snapshot shards by log entries and bytes (--snapshot-entries, 64 MiB); false: never by those, so a shard's log is never compacted while its events are unacknowledged (a shard whose consumers acknowledged a whole log segment still snapshots to free it); for measuring what snapshots cost")
	f.Int("segment-size", d.SegmentSize, "bytes at which a shard's log file is closed and the next begun; acknowledged events free disk a whole file at a time (0: 64 MiB)")
	f.Int("delivery-concurrency", d.DeliveryConcurrency, "concurrent pushes per shard (events of one key are always pushed one at a time)")
	f.Duration("shutdown-timeout", d.ShutdownTimeout, "how long in-flight requests may take on shutdown")
	f.String("log-level", d.LogLevel, "debug, info, warn or error")
	f.String("tls-cert-file", d.TLSCertFile, "serve TLS with this PEM certificate (chain); reloaded on SIGHUP or when it changes")
	f.String("tls-key-file", d.TLSKeyFile, "the PEM private key of --tls-cert-file")
	f.String("peer-ca-file", d.PeerCAFile, "in a cluster, the PEM CA that signs every node's --tls-cert-file: nodes then dial each other over mutual TLS and the node-to-node service refuses anyone else")
	f.String("tokens-file", d.TokensFile, "file of the API tokens callers must present (herald token create writes it); reloaded on SIGHUP")
	f.Bool("insecure-no-auth", d.InsecureNoAuth, "allow serving without tokens on a non-loopback address: anyone who reaches it may do everything")
	f.Bool("metrics-need-token", d.MetricsNeedToken, "make /metrics need a token (of any scope)")
	f.String("push-allow", d.PushAllow, "CIDRs and host names, comma-separated, that push endpoints may reach although private, loopback, link-local or metadata addresses")
	f.String("push-ca-dir", d.PushCADir, "directory that a topic's tls_ca_file must be in (empty: no topic may name a CA file)")
	f.Duration("dedup-window", d.DedupWindow, "how long a published event's dedup_id is remembered: a repeat within it returns the first event's id")
	f.Int("disk-free-limit", d.DiskFreeLimit, "free bytes on the data directory's disk under which new events are refused (resource_exhausted) while fetch, ack, delivery and deletes go on; publishing resumes by itself when space returns (0: no limit)")
	f.String("sns-zonegroup", d.SNSZonegroup, "zonegroup of the SNS-style API's topic ARNs (arn:aws:sns:<zonegroup>::<topic>)")
	f.Int("boot-parallelism", d.BootParallelism, "shards opened at once when the node starts (0: a number suited to the machine's CPUs)")
	f.String("alert-webhook", d.AlertWebhook, "operator webhook (http or https URL) told, as JSON, when a subscription is disabled because its endpoint is gone (HTTP 410) or kept failing for its disable_after, and when one is enabled again (empty: none; the log and herald_subscription_disabled_total still say)")
	f.String("alert-secret", d.AlertSecret, "secret that signs the --alert-webhook's requests (X-Herald-Signature, as webhook deliveries are signed)")
	f.String("tier-url", d.TierURL, "object store that old backlog is tiered to: s3://bucket?region=R (AWS credentials from the environment; &endpoint=http://host:port&use_path_style=true for an S3-compatible server), file:///dir, or empty: off (see docs/operations.md, Tiering)")
	f.Int("tier-parallelism", d.TierParallelism, "LRO advances in flight at once in a tiering cycle (1: one by one)")
	f.Duration("tier-interval", d.TierInterval, "time between the starts of tiering cycles")
	f.Int64("tier-local-retention", d.TierLocalRetention, "bytes of each shard's newest log kept on the local disk when tiering, for topics whose local_retention_bytes is 0")
	f.Int64("tier-cache-bytes", d.TierCacheBytes, "bytes of tiered log entries read back from the object store kept in memory (read-ahead included)")
	f.String("pprof-listen", d.PprofListen, "serve Go's profiles (/debug/pprof/) on this loopback address, e.g. 127.0.0.1:6060 (empty: off)")
	return cmd
}

// Settings are read with koanf rather than ff: ff parses the command line
// itself, into its own flag set, and names config-file keys after the
// flags (data-dir), whereas cobra parses serve's pflag flags and the YAML
// names are snake_case (data_dir). koanf reads a parsed pflag set (posflag),
// the environment and a YAML file into one key space, the yaml names, and
// decodes the result into a struct whatever its field types.

// envPrefix starts the environment variable of every serve setting.
const envPrefix = "HERALD_"

// envName returns the environment variable of the setting key (a yaml name).
func envName(key string) string { return envPrefix + strings.ToUpper(key) }

// flagName returns the flag of the setting key.
func flagName(key string) string { return strings.ReplaceAll(key, "_", "-") }

// loadServeConfig layers the settings, lowest first: the defaults, the
// config file named by --config, the environment, and the flags set in set.
// A setting the config file does not know, or a value that does not fit its
// setting, is an error naming both.
func loadServeConfig(set *pflag.FlagSet) (serveConfig, error) {
	// The defaults are the bottom layer, and name every setting there is.
	k := koanf.New(".")
	if err := k.Load(structs.Provider(defaultServeConfig(), "yaml"), nil); err != nil {
		return serveConfig{}, fmt.Errorf("serve defaults: %w", err)
	}
	var layers []*koanf.Koanf
	if configFile, _ := set.GetString("config"); configFile != "" {
		l, err := configFileLayer(k, configFile)
		if err != nil {
			return serveConfig{}, err
		}
		layers = append(layers, l)
	}
	env, err := envLayer(k)
	if err != nil {
		return serveConfig{}, err
	}
	flags, err := flagLayer(k, set)
	if err != nil {
		return serveConfig{}, err
	}
	for _, l := range append(layers, env, flags) {
		if err := k.Merge(l); err != nil {
			return serveConfig{}, err
		}
	}
	var cfg serveConfig
	if err := decodeSettings(k, &cfg, true); err != nil {
		return serveConfig{}, fmt.Errorf("serve settings: %w", err)
	}
	return cfg, nil
}

// configFileLayer reads the YAML file name, checking each setting against
// the defaults in known.
func configFileLayer(known *koanf.Koanf, name string) (*koanf.Koanf, error) {
	l := koanf.New(".")
	if err := l.Load(file.Provider(name), yaml.Parser()); err != nil {
		if _, ok := errors.AsType[*fs.PathError](err); ok {
			return nil, fmt.Errorf("read config file: %w", err)
		}
		return nil, fmt.Errorf("config file %s: %w (settings are snake_case, e.g. data_dir: /var/lib/herald)", name, err)
	}
	for _, key := range l.Keys() {
		if !known.Exists(key) {
			return nil, fmt.Errorf("config file %s: unknown setting %q (settings are snake_case, e.g. data_dir: /var/lib/herald)", name, key)
		}
	}
	// YAML values are typed: a number is no duration, a word no number.
	err := checkSettings(known, l, false, func(key string) string {
		return fmt.Sprintf("config file %s: %s: %q", name, key, fmt.Sprint(l.Get(key)))
	})
	return l, err
}

// envLayer reads the HERALD_ variables of the settings in known; others,
// such as HERALD_SERVER, belong to other commands and are left alone.
func envLayer(known *koanf.Koanf) (*koanf.Koanf, error) {
	l := koanf.New(".")
	err := l.Load(env.Provider(".", env.Opt{
		Prefix: envPrefix,
		TransformFunc: func(name, value string) (string, any) {
			key := strings.ToLower(strings.TrimPrefix(name, envPrefix))
			if envName(key) != name || !known.Exists(key) {
				return "", nil
			}
			return key, value
		},
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("environment: %w", err)
	}
	err = checkSettings(known, l, true, func(key string) string {
		return fmt.Sprintf("environment variable %s=%q", envName(key), l.String(key))
	})
	return l, err
}

// flagLayer reads the flags of set that were set and name a setting in
// known; pflag has already checked their values.
func flagLayer(known *koanf.Koanf, set *pflag.FlagSet) (*koanf.Koanf, error) {
	l := koanf.New(".")
	// With no koanf to consult (nil), posflag takes only the flags set.
	err := l.Load(posflag.ProviderWithFlag(set, ".", nil, func(f *pflag.Flag) (string, any) {
		key := strings.ReplaceAll(f.Name, "-", "_")
		if flagName(key) != f.Name || !known.Exists(key) {
			return "", nil
		}
		return key, posflag.FlagVal(set, f)
	}), nil)
	if err != nil {
		return nil, fmt.Errorf("flags: %w", err)
	}
	return l, nil
}

// checkSettings decodes each setting of layer on its own, so that a bad
// value is reported as source(key) said it, with what its setting wants
// (known holds a value of the setting's type). weak accepts text for
// numbers and booleans, as environment variables are.
func checkSettings(known, layer *koanf.Koanf, weak bool, source func(key string) string) error {
	for _, key := range layer.Keys() {
		one := koanf.New(".")
		one.Set(key, layer.Get(key))
		var scratch serveConfig
		if err := decodeSettings(one, &scratch, weak); err != nil {
			return fmt.Errorf("%s: %s", source(key), want(reflect.TypeOf(known.Get(key))))
		}
	}
	return nil
}

// decodeSettings decodes the settings of k into cfg; with weak, text also
// fills numbers and booleans.
func decodeSettings(k *koanf.Koanf, cfg *serveConfig, weak bool) error {
	return k.UnmarshalWithConf("", cfg, koanf.UnmarshalConf{
		Tag: "yaml",
		DecoderConfig: &mapstructure.DecoderConfig{
			DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, wholeNumberHook, scalarTextHook),
			WeaklyTypedInput: weak,
			ErrorUnused:      true,
			Result:           cfg,
		},
	})
}

var durationType = reflect.TypeFor[time.Duration]()

// durationHook reads durations from text such as "30s" only: a bare number
// would silently be nanoseconds.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == durationType {
		return data, nil
	}
	s, ok := data.(string)
	if !ok {
		return nil, errors.New("not a duration")
	}
	return time.ParseDuration(s)
}

// wholeNumberHook refuses to cut a fraction off a number for an integer
// setting.
func wholeNumberHook(from, to reflect.Type, data any) (any, error) {
	f, ok := data.(float64)
	if ok && to != durationType && isInteger(to.Kind()) && f != math.Trunc(f) {
		return nil, errors.New("not a whole number")
	}
	return data, nil
}

// scalarTextHook lets a YAML number or boolean fill a text setting, as in
// data_dir: 2024.
func scalarTextHook(from, to reflect.Type, data any) (any, error) {
	if to.Kind() != reflect.String {
		return data, nil
	}
	switch k := from.Kind(); {
	case k == reflect.Bool, isInteger(k), k == reflect.Float32, k == reflect.Float64:
		return fmt.Sprint(data), nil
	}
	return data, nil
}

func isInteger(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uint64
}

// want says what a value of a setting of type t must look like.
func want(t reflect.Type) string {
	switch k := t.Kind(); {
	case t == durationType:
		return "want a duration such as 30s"
	case k == reflect.Bool:
		return "want true or false"
	case isInteger(k):
		return "want a whole number"
	case k == reflect.Float32 || k == reflect.Float64:
		return "want a number"
	case k == reflect.String:
		return "want text"
	}
	return "want a " + t.String()
}

// Bounds of --segment-size: smaller files would be many, and the largest
// is already 16 times the default.
const (
	minSegmentSize = 4 << 10
	maxSegmentSize = 1 << 30
)

// checkSegmentSize refuses a segment size out of bounds; 0 is the default.
func checkSegmentSize(size int) error {
	if size != 0 && (size < minSegmentSize || size > maxSegmentSize) {
		return fmt.Errorf("segment size %d: give --segment-size (segment_size, HERALD_SEGMENT_SIZE) in bytes, from %d (4 KiB) to %d (1 GiB), or 0 for the default of 64 MiB",
			size, minSegmentSize, maxSegmentSize)
	}
	return nil
}

// BenchSyncSnapshotsEnv, set to 1 in serve's environment, makes the node
// write its snapshots on the apply loop, as herald did before snapshots
// were written in the background. It is no setting of herald's: the
// benchmarks (bench/compare, scripts/bench-peers.sh r3) use it to compare
// the two, and it is documented there only.
const BenchSyncSnapshotsEnv = "HERALD_BENCH_SYNC_SNAPSHOTS"

// TestTierCrashEnv, set to a step of the tiering reconciler ("upload",
// "record" or "advance"), makes serve SIGKILL itself right after that
// step: the crash tests of tiering (tests/e2e) kill the process exactly
// between two steps with it. It is no setting of herald's.
const TestTierCrashEnv = "HERALD_TEST_TIER_CRASH_AFTER"

// tierCrashHook returns the reconciler's AfterStep for TestTierCrashEnv,
// nil when it is not set.
func tierCrashHook() func(step string) {
	want := os.Getenv(TestTierCrashEnv)
	if want == "" {
		return nil
	}
	return func(step string) {
		if step == want {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
}

// diskFreeLimit turns --disk-free-limit into node.Config's: there 0 is the
// default, and off is negative.
func diskFreeLimit(limit int) int64 {
	if limit <= 0 {
		return -1
	}
	return int64(limit)
}

func serve(ctx context.Context, cfg serveConfig, stderr interface{ Write([]byte) (int, error) }) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("log level %q: use debug, info, warn or error", cfg.LogLevel)
	}
	if err := checkSegmentSize(cfg.SegmentSize); err != nil {
		return err
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
	sec, err := newSecurity(cfg, ln.Addr(), logger)
	if err != nil {
		return err
	}
	defer sec.reloadOnHangup()()
	stopPprof, err := startPprof(cfg.PprofListen, logger)
	if err != nil {
		return err
	}
	defer stopPprof()

	peers, err := parsePeers(cfg.Peers, cfg.NodeID, sec.peerScheme())
	if err != nil {
		return err
	}
	// Serve at once, before the node opens: in a cluster, the node waits
	// for a majority of its peers, which reach it through this server.
	var tr *transport.Transport
	mux := http.NewServeMux()
	if len(peers) > 1 {
		if err := sec.checkCluster(ln.Addr(), cfg.InsecureNoAuth); err != nil {
			return err
		}
		tr = transport.New(transport.Config{NodeID: cfg.NodeID, Peers: peers, TLS: sec.peerTLS, Logger: logger})
		defer tr.Close()
		mux.Handle(tr.Handler())
	}
	front := &gate{}
	mux.Handle("/", front)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC without TLS
	protocols.SetHTTP2(true)            // and with it
	srv := &http.Server{
		Handler:           mux,
		Protocols:         &protocols,
		TLSConfig:         sec.tls,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn), // failed TLS handshakes, say
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	served := make(chan struct{})
	go func() {
		if sec.tls != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
		} else {
			errc <- srv.Serve(ln)
		}
		close(served)
	}()
	defer func() {
		srv.Close()
		<-served
	}()

	start := time.Now()
	reg := prometheus.NewRegistry()
	n, err := node.Open(ctx, node.Config{
		DataDir:            cfg.DataDir,
		NodeID:             cfg.NodeID,
		Members:            slices.Collect(maps.Keys(peers)), // node.Config sorts them
		Addresses:          peerAddresses(peers),
		Join:               cfg.Join,
		Transport:          tr,
		MaxPayloadBytes:    cfg.MaxPayloadBytes,
		ReservationTimeout: cfg.ReservationTimeout,
		StorageConfig: snapshotConfig(cfg, host.StorageConfig{
			SnapshotEntries: cfg.SnapshotEntries,
			SyncSnapshots:   os.Getenv(BenchSyncSnapshotsEnv) == "1",
			SegmentSize:     int64(cfg.SegmentSize),
			BootParallelism: cfg.BootParallelism,
		}),
		DeliveryConcurrency: cfg.DeliveryConcurrency,
		DedupWindow:         cfg.DedupWindow,
		DiskFreeLimit:       diskFreeLimit(cfg.DiskFreeLimit),
		Logger:              logger,
		Registerer:          reg,
		PushGuard:           pushGuard(cfg),
		AlertWebhook:        cfg.AlertWebhook,
		AlertSecret:         cfg.AlertSecret,
		SNSZonegroup:        cfg.SNSZonegroup,
		Tier: node.TierConfig{URL: cfg.TierURL, Parallelism: cfg.TierParallelism, Interval: cfg.TierInterval,
			LocalRetention: cfg.TierLocalRetention, CacheBytes: cfg.TierCacheBytes, AfterStep: tierCrashHook()},
	})
	if err != nil {
		return err
	}
	defer n.Close()
	for name, err := range n.BrokenShards() {
		logger.Error("shard unavailable", "shard", name, "err", err)
	}

	// The dashboard's sampler reads the node: it stops before the node
	// closes, on every path.
	dash := dashboard.New(n, dashboard.Config{Logger: logger})
	stopDashboard := runUntilStopped(dash.Run)
	defer stopDashboard()
	stopStreams := make(chan struct{})
	front.open(api.NewHandler(n, reg, api.Options{Stop: stopStreams, Tokens: sec.tokens, MetricsNeedToken: cfg.MetricsNeedToken, Dashboard: dash, Logger: logger,
		SNSZonegroup: cfg.SNSZonegroup}))
	logger.Info("herald is serving", "listen", ln.Addr().String(), "dashboard", map[bool]string{false: "http", true: "https"}[sec.tls != nil]+"://"+ln.Addr().String()+"/dashboard/", "tls", sec.tls != nil, "tokens", sec.tokens != nil, "data_dir", cfg.DataDir,
		"topics", len(n.ListTopics()), "boot", time.Since(start).Round(time.Millisecond))

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: finishing requests in flight", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// API requests first, while the node-to-node streams still carry
	// what they need; then the streams, which Shutdown would wait for.
	close(stopStreams) // publish streams answer what they read, then close
	front.drain(sctx.Done())
	if tr != nil {
		tr.Close()
	}
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		logger.Warn("requests still running at the shutdown timeout were cut off", "err", err)
	}
	<-served
	stopDashboard()
	if err := n.Close(); err != nil {
		return err
	}
	logger.Info("stopped")
	return nil
}

// snapshotConfig applies --snapshots=false to sc: thresholds of entries and
// bytes that a log never reaches, so that no snapshot is due by them.
func snapshotConfig(cfg serveConfig, sc host.StorageConfig) host.StorageConfig {
	if !cfg.Snapshots {
		sc.SnapshotEntries = math.MaxUint64
		sc.SnapshotBytes = math.MaxInt64
	}
	return sc
}
