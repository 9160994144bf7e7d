package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newServeCommand is a placeholder until serve.go defines the real command.
// TODO: delete this file when serve.go lands.
func newServeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run a herald node (not available in this build)",
		Long:  "Run a herald node. This build does not include the server yet.",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("serve is not available in this build")
		},
	}
}
