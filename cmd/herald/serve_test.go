package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"herald/internal/testkit"
)

// loadServeArgs parses args as serve's command line and loads the settings.
func loadServeArgs(t *testing.T, args ...string) (serveConfig, error) {
	t.Helper()
	cmd := newServeCommand()
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return loadServeConfig(cmd.Flags())
}

// writeConfig writes a YAML config file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sample is a value of a setting's type, as Go value and as text.
type sample struct {
	value any
	text  string
}

// serveSamples has a value for each type a serve setting may have, two per
// type so that one differs from the default. A field of a new type fails
// TestServeConfigEveryFieldFromEverySource until it has samples here.
var serveSamples = map[reflect.Type][2]sample{
	reflect.TypeFor[string]():        {{"from-a-source", "from-a-source"}, {"also-from-a-source", "also-from-a-source"}},
	reflect.TypeFor[int]():           {{7, "7"}, {8, "8"}},
	reflect.TypeFor[uint64]():        {{uint64(7), "7"}, {uint64(8), "8"}},
	reflect.TypeFor[int64]():         {{int64(7), "7"}, {int64(8), "8"}},
	reflect.TypeFor[bool]():          {{true, "true"}, {false, "false"}},
	reflect.TypeFor[time.Duration](): {{7 * time.Second, "7s"}, {8 * time.Minute, "8m"}},
	reflect.TypeFor[float64]():       {{2.5, "2.5"}, {3.5, "3.5"}},
}

// TestServeConfigEveryFieldFromEverySource sets each field of serveConfig
// from a flag, an environment variable and the config file in turn, so
// that no field, of whatever type, is silently ignored by a source.
func TestServeConfigEveryFieldFromEverySource(t *testing.T) {
	defaults := reflect.ValueOf(defaultServeConfig())
	typ := defaults.Type()
	for i := range typ.NumField() {
		field := typ.Field(i)
		key := field.Tag.Get("yaml")
		if key == "" {
			t.Errorf("field %s has no yaml name", field.Name)
			continue
		}
		samples, ok := serveSamples[field.Type]
		if !ok {
			t.Errorf("field %s: no sample of type %s; add one to serveSamples", field.Name, field.Type)
			continue
		}
		s := samples[0]
		if reflect.DeepEqual(defaults.Field(i).Interface(), s.value) {
			s = samples[1]
		}
		sources := map[string]func(t *testing.T) (serveConfig, error){
			"flag": func(t *testing.T) (serveConfig, error) {
				// --name=value: "--name value" would not set a boolean
				// flag to false.
				return loadServeArgs(t, "--"+flagName(key)+"="+s.text)
			},
			"environment": func(t *testing.T) (serveConfig, error) {
				t.Setenv(envName(key), s.text)
				return loadServeArgs(t)
			},
			"config file": func(t *testing.T) (serveConfig, error) {
				return loadServeArgs(t, "--config", writeConfig(t, key+": "+s.text+"\n"))
			},
		}
		for source, load := range sources {
			t.Run(key+" from "+source, func(t *testing.T) {
				cfg, err := load(t)
				if err != nil {
					t.Fatal(err)
				}
				got := reflect.ValueOf(cfg)
				for j := range typ.NumField() {
					want := defaults.Field(j).Interface()
					if j == i {
						want = s.value
					}
					if g := got.Field(j).Interface(); !reflect.DeepEqual(g, want) {
						t.Errorf("%s = %v, want %v", typ.Field(j).Name, g, want)
					}
				}
			})
		}
	}
}

func TestServeConfigPrecedence(t *testing.T) {
	file := writeConfig(t, "listen: 127.0.0.1:1001\ndata_dir: /from/file\nlog_level: warn\n")
	t.Setenv("HERALD_LISTEN", "127.0.0.1:1002")
	t.Setenv("HERALD_DATA_DIR", "/from/env")
	t.Setenv("HERALD_SERVER", "http://127.0.0.1:1") // another command's: ignored
	cfg, err := loadServeArgs(t, "--config", file, "--listen", "127.0.0.1:1003")
	if err != nil {
		t.Fatal(err)
	}
	want := defaultServeConfig()
	want.Listen = "127.0.0.1:1003" // the flag over the environment and the file
	want.DataDir = "/from/env"     // the environment over the file
	want.LogLevel = "warn"         // the file over the default
	if cfg != want {
		t.Errorf("settings %+v, want %+v", cfg, want)
	}
}

func TestServeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		yaml string // a config file, if not empty
		want string // with FILE for the file's path
	}{
		{env: map[string]string{"HERALD_MAX_PAYLOAD_BYTES": "abc"},
			want: `environment variable HERALD_MAX_PAYLOAD_BYTES="abc": want a whole number`},
		{env: map[string]string{"HERALD_SNAPSHOT_ENTRIES": "-1"},
			want: `environment variable HERALD_SNAPSHOT_ENTRIES="-1": want a whole number`},
		{env: map[string]string{"HERALD_INSECURE_NO_AUTH": "maybe"},
			want: `environment variable HERALD_INSECURE_NO_AUTH="maybe": want true or false`},
		{env: map[string]string{"HERALD_RESERVATION_TIMEOUT": "30"},
			want: `environment variable HERALD_RESERVATION_TIMEOUT="30": want a duration such as 30s`},
		{yaml: "listen: 127.0.0.1:7600\nfoo: 1\n",
			want: `config file FILE: unknown setting "foo" (settings are snake_case, e.g. data_dir: /var/lib/herald)`},
		{yaml: "dataDir: /var/lib/herald\n", want: `config file FILE: unknown setting "dataDir"`},
		{yaml: "data_dir:\n  nested: x\n", want: `config file FILE: unknown setting "data_dir.nested"`},
		{yaml: "max_payload_bytes: lots\n", want: `config file FILE: max_payload_bytes: "lots": want a whole number`},
		{yaml: "max_payload_bytes: 1.5\n", want: `config file FILE: max_payload_bytes: "1.5": want a whole number`},
		{yaml: "reservation_timeout: 30\n", want: `config file FILE: reservation_timeout: "30": want a duration such as 30s`},
		{yaml: "insecure_no_auth: 1\n", want: `config file FILE: insecure_no_auth: "1": want true or false`},
		{yaml: "listen: [a, b]\n", want: `config file FILE: listen: "[a b]": want text`},
		{yaml: "listen: [\n", want: `config file FILE: yaml: `},
	} {
		for name, value := range tc.env {
			t.Setenv(name, value)
		}
		var args []string
		file := ""
		if tc.yaml != "" {
			file = writeConfig(t, tc.yaml)
			args = []string{"--config", file}
		}
		_, err := loadServeArgs(t, args...)
		want := strings.ReplaceAll(tc.want, "FILE", file)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("env %v, file %q: err = %v, want %q", tc.env, tc.yaml, err, want)
		}
		for name := range tc.env {
			os.Unsetenv(name) // t.Setenv restores it at the end; the next case needs it gone
		}
	}

	_, err := loadServeArgs(t, "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.Contains(err.Error(), "read config file: ") || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
}

// TestServeConfigYAMLNumbersAsText checks that a YAML number fills a text
// setting, as it did before koanf, and that YAML durations are text.
func TestServeConfigYAMLNumbersAsText(t *testing.T) {
	cfg, err := loadServeArgs(t, "--config", writeConfig(t, "data_dir: 2024\nshutdown_timeout: 1m30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "2024" || cfg.ShutdownTimeout != 90*time.Second {
		t.Errorf("data_dir %q shutdown_timeout %v, want 2024 and 1m30s", cfg.DataDir, cfg.ShutdownTimeout)
	}
}

// TestServeHelpNamesEverySetting checks that serve --help lists every
// setting's flag and environment variable.
func TestServeHelpNamesEverySetting(t *testing.T) {
	r := runCLI(context.Background(), "", "serve", "--help")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	typ := reflect.TypeFor[serveConfig]()
	for i := range typ.NumField() {
		key := typ.Field(i).Tag.Get("yaml")
		for _, want := range []string{envName(key), "--" + flagName(key) + " "} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("serve --help does not name %s:\n%s", want, r.stdout)
			}
		}
	}
}

// TestServeRefusesABadSegmentSize: a segment size out of bounds is
// refused with what to give instead, before anything is written.
func TestServeRefusesABadSegmentSize(t *testing.T) {
	for _, size := range []string{"-1", "100", "4095", "1073741825"} {
		dir := t.TempDir()
		r := runCLI(context.Background(), "", "serve", "--data-dir", dir, "--listen", testkit.FreeAddr(t), "--segment-size="+size)
		want := "segment size " + size + ": give --segment-size (segment_size, HERALD_SEGMENT_SIZE) in bytes, from 4096 (4 KiB) to 1073741824 (1 GiB), or 0 for the default of 64 MiB"
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("serve --segment-size %s: exit %d, stderr %q; want it to say %q", size, r.code, r.stderr, want)
		}
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("serve --segment-size %s wrote %d entries in its data directory (%v), want none", size, len(entries), err)
		}
	}
}
