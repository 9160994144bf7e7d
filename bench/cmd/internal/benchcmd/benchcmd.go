// Package benchcmd holds what the peer benchmark commands under bench/cmd
// share beside the load itself: the process's signal handling and exit
// status, the parsing of the load flags, and the output flags.
package benchcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"herald/bench/load"
)

// Main runs a benchmark command: run gets a context cancelled by
// SIGINT or SIGTERM and the command-line arguments, and an error ends the
// process with status 1 after printing "name: error".
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// ParseFlags parses args with fs, on which cfg and out have registered
// their flags, refuses positional arguments, and resolves and checks both.
func ParseFlags(fs *pflag.FlagSet, args []string, cfg *load.Config, out *Output) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.Resolve(fs); err != nil {
		return err
	}
	return out.Validate()
}

// ParseConsumeFlags is ParseFlags for a consumption run, whose flags cc
// registered.
func ParseConsumeFlags(fs *pflag.FlagSet, args []string, cc *load.ConsumeConfig, out *Output) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cc.Validate(); err != nil {
		return err
	}
	return out.Validate()
}

// Output is the output flags of the benchmark commands, which print like
// herald bench publish: --output human or json, and --results FILE.
type Output struct {
	Format  string
	Results string
}

// AddFlags defines --output (-o) and --results on fs.
func (o *Output) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Format, "output", "o", "human", `output format: "human" or "json"`)
	fs.StringVar(&o.Results, "results", "", "also write the result as JSON to this file")
}

// Validate checks --output.
func (o *Output) Validate() error {
	if o.Format != "human" && o.Format != "json" {
		return fmt.Errorf("--output %q: want human or json", o.Format)
	}
	return nil
}

// Write writes r to w in the chosen format, and its JSON to the results
// file if one was given.
func (o *Output) Write(w io.Writer, r *load.Result) error {
	return o.WriteValue(w, r, func(w io.Writer) error { return load.WriteText(w, r) })
}

// WriteValue writes v to w as JSON, or with text for people, as chosen,
// and its JSON to the results file if one was given.
func (o *Output) WriteValue(w io.Writer, v any, text func(io.Writer) error) error {
	if o.Results != "" {
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.Results, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("--results: %w", err)
		}
	}
	if o.Format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	return text(w)
}
