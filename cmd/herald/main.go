// Command herald runs a herald node and talks to one: it manages topics,
// publishes events, and consumes them.
//
// Run "herald --help" for the commands, and "herald COMMAND --help" for
// each one's flags and examples.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"herald/client"
)

// serverEnv names the environment variable that sets the default --server.
const serverEnv = "HERALD_SERVER"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, let a second one end the process at once.
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit code. Errors are
// written to stderr as "herald: <message>".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "herald: %s\n", errorMessage(err))
		return 1
	}
	return 0
}

// globals holds the flags every command accepts.
type globals struct {
	server  string
	output  string
	timeout time.Duration
	token   string      // --token or $HERALD_TOKEN
	caFile  string      // --ca-file or $HERALD_CA_FILE
	tls     *tls.Config // from caFile
	stderr  io.Writer   // the command's, for notices

	c *client.Client // made by client on first use
}

// newRootCommand returns the herald command with all its subcommands.
func newRootCommand() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "herald",
		Short: "herald is a durable, sharded, replicated event queue",
		Long: `herald is a durable, sharded, replicated event queue.

Applications publish events to topics; each topic is split into shards, and
herald delivers every event at least once, in order per key, to the topic's
push endpoint or to pull consumers.

This one binary runs a node (herald serve) and talks to one: every other
command calls the server given by --server, or by the ` + serverEnv + `
environment variable.`,
		Example: `  herald serve
  herald topic create orders --shards 4
  echo '{"total":12}' | herald publish orders --key customer-42
  herald consume orders --follow`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return g.resolve(cmd)
		},
	}
	root.SetFlagErrorFunc(flagError)
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", client.DefaultAddress,
		"base URL of the herald server; $"+serverEnv+" changes the default")
	pf.StringVarP(&g.output, "output", "o", "human", `output format: "human" or "json"`)
	pf.DurationVar(&g.timeout, "timeout", 30*time.Second,
		"time limit for each request to the server (0: none)")
	pf.StringVar(&g.token, "token", "",
		"API token for a server that requires one (herald token create); $"+tokenEnv+" sets it without showing it in the process list")
	pf.StringVar(&g.caFile, "ca-file", "",
		"PEM file of the CA that signed an https:// server's certificate; $"+caFileEnv+" sets the default")
	root.AddCommand(
		newServeCommand(),
		newRepairCommand(),
		newTopicCommand(g),
		newSubscriptionCommand(g),
		newPublishCommand(g),
		newReserveCommand(g),
		newCommitCommand(g),
		newAbortCommand(g),
		newConsumeCommand(g),
		newDLQCommand(g),
		newClusterCommand(g),
		newBenchCommand(g),
		newTokenCommand(g),
		newWaitCommand(g),
	)
	for _, cmd := range root.Commands() {
		refuseUnknownSubcommands(cmd)
	}
	return root
}

// refuseUnknownSubcommands makes cmd and the command groups under it fail
// on a subcommand they do not have, naming the ones it resembles. Cobra
// checks that only at the root: a group without Run of its own would print
// its help and exit 0, so a misspelt "herald topic creat x" would look as
// if it had worked.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	// The misspelt subcommand's flags are not the group's: let them through
	// to report the subcommand, not a flag.
	cmd.FParseErrWhitelist.UnknownFlags = true
	cmd.Args = cobra.ArbitraryArgs
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it applies at the root only
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return fmt.Errorf("%s\nrun %q for its commands", msg, cmd.CommandPath()+" --help")
	}
}

// resolve checks the global flags and applies the environment.
func (g *globals) resolve(cmd *cobra.Command) error {
	g.stderr = cmd.ErrOrStderr()
	if f := cmd.Flags().Lookup("server"); f != nil && !f.Changed {
		if env := os.Getenv(serverEnv); env != "" {
			g.server = env
		}
	}
	if err := g.resolveAuth(cmd); err != nil {
		return err
	}
	switch g.output {
	case "human", "json":
		return nil
	}
	return fmt.Errorf("--output %q: want human or json", g.output)
}

func (g *globals) json() bool { return g.output == "json" }

// client returns the client for --server, made once per command line.
func (g *globals) client() *client.Client {
	if g.c == nil {
		g.c = client.New(g.server, g.clientOptions()...)
	}
	return g.c
}

// explain adds advice to errors that did not come from the server.
func (g *globals) explain(err error) error {
	if err == nil || connect.IsWireError(err) {
		return err
	}
	if advice := tlsAdvice(err); advice != "" {
		return fmt.Errorf("TLS with the herald server at %s failed: %w\n%s", g.server, err, advice)
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return fmt.Errorf("cannot reach the herald server at %s: %w\n"+
			"start it with \"herald serve\", or point --server or $%s at a running one",
			g.server, err, serverEnv)
	case connect.CodeDeadlineExceeded:
		return fmt.Errorf("no answer from the herald server at %s within --timeout %v: %w\n"+
			"the server may be overloaded; retry, or raise --timeout", g.server, g.timeout, err)
	}
	return err
}

// errorMessage renders err for the user. The server's messages say what was
// wrong and what to do, so they are shown without the code prefix that
// connect adds.
func errorMessage(err error) string {
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Message() != "" {
		msg = strings.Replace(msg, ce.Error(), ce.Message(), 1)
	}
	return msg
}

// flagError points at the help of the command whose flags were wrong,
// and says what a flag's value should have been, rather than which Go
// parser refused it.
func flagError(cmd *cobra.Command, err error) error {
	var bad *pflag.InvalidValueError
	if errors.As(err, &bad) {
		f := bad.GetFlag()
		err = fmt.Errorf("--%s %q: want %s", f.Name, bad.GetValue(), valueKind(f.Value.Type()))
	}
	return fmt.Errorf("%w\nrun %q for usage", err, cmd.CommandPath()+" --help")
}

// valueKind says in words what a flag of pflag's type typ takes.
func valueKind(typ string) string {
	switch typ {
	case "int", "int32", "int64":
		return "a whole number, such as 4"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number from 0 up, such as 4"
	case "float32", "float64":
		return "a number, such as 0.5"
	case "duration":
		return "a duration with its unit, such as 500ms, 30s or 2m"
	case "bool":
		return "true or false"
	}
	return "a " + typ
}

// nArgs accepts exactly n positional arguments, or at least n when more is
// set, and otherwise explains the usage.
func nArgs(n int, more bool) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n || (more && len(args) > n) {
			return nil
		}
		return fmt.Errorf("wrong number of arguments (%d)\nusage: %s", len(args), cmd.UseLine())
	}
}
