package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/spf13/cobra"

	"herald/client"
	"herald/internal/auth"
	"herald/internal/tlsconfig"
)

// The environment variables of the client's credentials.
const (
	tokenEnv  = "HERALD_TOKEN"
	caFileEnv = "HERALD_CA_FILE"
)

// resolveAuth applies $HERALD_TOKEN and $HERALD_CA_FILE and loads the CA
// file.
func (g *globals) resolveAuth(cmd *cobra.Command) error {
	for _, f := range []struct {
		flag, env string
		v         *string
	}{{"token", tokenEnv, &g.token}, {"ca-file", caFileEnv, &g.caFile}} {
		if fl := cmd.Flags().Lookup(f.flag); fl != nil && !fl.Changed {
			if env := os.Getenv(f.env); env != "" {
				*f.v = env
			}
		}
	}
	if g.caFile == "" {
		return nil
	}
	tc, err := tlsconfig.Client(nil, g.caFile)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	g.tls = tc
	return nil
}

// clientOptions are the options of the client for the global flags.
func (g *globals) clientOptions() []client.Option {
	opts := []client.Option{client.WithTimeout(g.timeout), client.WithHTTPClient(g.httpClient())}
	if g.token != "" {
		opts = append(opts, client.WithToken(g.token))
	}
	if g.tls != nil {
		opts = append(opts, client.WithTLSConfig(g.tls))
	}
	return opts
}

func newTokenCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API tokens",
		Long: `Make the API tokens that a server started with --tokens-file requires:
each has scopes (admin, publish, consume), a name for the audit log and an
optional expiry. See herald token create --help.`,
		Example: `  herald token create --scope publish --name ci --tokens-file /etc/herald/tokens`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCommand(g))
	return cmd
}

func newTokenCreateCommand(g *globals) *cobra.Command {
	var scopes, name, file string
	var expiresIn time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Make a new API token",
		Long: `Make a new API token and print it, once: herald keeps only its SHA-256.

Scopes: admin (create, change and delete topics; list, replay and purge dead
letters), publish (publish, reserve, commit, abort) and consume (fetch, ack,
nack); any token may read topics and their statistics.

With --tokens-file, the token's line is appended to that file (created with
mode 0600 if missing); otherwise add the printed line to the file that herald
serve's --tokens-file names. A running server reads the file again on SIGHUP.

Clients pass the token with --token or $HERALD_TOKEN; the aws CLI and boto3
pass it as the access key id (AWS_ACCESS_KEY_ID) to the SNS API.

With --output json it prints one object: the token, its id, name, scopes
and expiry, its line for the tokens file, and the file it was added to.`,
		Example: `  herald token create --scope publish --name ci --tokens-file /etc/herald/tokens
  herald token create --scope admin,consume --name ops --expires-in 720h
  herald token create --scope consume --name app -o json | jq -r .token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, err := auth.ParseScopes(scopes)
			if err != nil {
				return fmt.Errorf("--scope: %w", err)
			}
			var expires time.Time
			if expiresIn < 0 {
				return fmt.Errorf("--expires-in %v: give a positive duration such as 720h, or 0 for a token that never expires", expiresIn)
			}
			if expiresIn > 0 {
				expires = time.Now().Add(expiresIn).Truncate(time.Second)
			}
			secret, tok, err := auth.New(name, sc, expires)
			if err != nil {
				return err
			}
			if file != "" {
				if err := appendToken(file, tok); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if g.json() {
				return writeJSON(out, tokenJSON(secret, tok, file))
			}
			fmt.Fprintf(out, "token: %s\n", secret)
			if file != "" {
				fmt.Fprintf(out, "added to %s (send the server SIGHUP to load it):\n%s\n", file, tok.Line())
			} else {
				fmt.Fprintf(out, "add this line to the server's tokens file (then send it SIGHUP):\n%s\n", tok.Line())
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&scopes, "scope", "", "admin, publish or consume; several separated by commas (required)")
	f.StringVar(&name, "name", "", "what the token is for, shown in the audit log (required)")
	f.StringVar(&file, "tokens-file", "", "append the token's line to this file")
	f.DurationVar(&expiresIn, "expires-in", 0, "the token expires after this long (0: never)")
	cmd.MarkFlagRequired("scope")
	cmd.MarkFlagRequired("name")
	return cmd
}

// createdToken is how token create -o json shows a new token.
type createdToken struct {
	Token      string     `json:"token"`
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	ExpiresAt  *time.Time `json:"expiresAt"`  // null: never
	Line       string     `json:"line"`       // for the server's tokens file
	TokensFile string     `json:"tokensFile"` // where Line was added; "" if nowhere
}

func tokenJSON(secret string, tok auth.Token, file string) createdToken {
	ct := createdToken{Token: secret, ID: tok.ID, Name: tok.Name, Scopes: []string{},
		Line: tok.Line(), TokensFile: file}
	for _, s := range tok.Scopes {
		ct.Scopes = append(ct.Scopes, string(s))
	}
	if !tok.Expires.IsZero() {
		exp := tok.Expires.UTC()
		ct.ExpiresAt = &exp
	}
	return ct
}

// appendToken adds tok's line to a tokens file, which must stay readable
// as one (a line of a token already there would be a duplicate).
func appendToken(file string, tok auth.Token) error {
	if _, err := auth.ReadFile(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w; fix the file before adding to it", err)
	}
	line := tok.Line() + "\n"
	if data, err := os.ReadFile(file); err == nil && len(data) > 0 && data[len(data)-1] != '\n' {
		line = "\n" + line // the last line was left unfinished by hand
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("tokens file: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("tokens file %s: %w", file, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("tokens file %s: %w", file, err)
	}
	return f.Close()
}

// tlsAdvice says what to do about a failed TLS handshake with the server,
// or "" if err is not one.
func tlsAdvice(err error) string {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is not signed by a CA this machine trusts; pass the CA's PEM file with --ca-file or $" + caFileEnv
	case errors.As(err, &hostname):
		return "the server's certificate is not for the host in --server; use a name or address the certificate lists"
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired, or not yet valid); renew it on the server"
	case errors.As(err, &record):
		return "the server does not speak TLS; use an http:// --server, or give the server --tls-cert-file and --tls-key-file"
	}
	return ""
}
