package load

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
)

// Main runs a peer benchmark command: run gets a context cancelled by
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
func ParseFlags(fs *pflag.FlagSet, args []string, cfg *Config, out *Output) error {
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
