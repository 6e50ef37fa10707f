package main

import (
	"bufio"
	"context"
	"os"

	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// newMoverCommand is what runs inside mover pods; it works on its working directory, the claim's
// mount, so that the same command serves real pods and the testbed.
func newMoverCommand(streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "mover", Hidden: true, Short: "Runs in mover pods", Args: noArgs}
	cmd.AddCommand(
		&cobra.Command{
			Use: "pack", Short: "Write a tar stream of the working directory to stdout", Args: noArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				out := bufio.NewWriterSize(streams.Out, 1<<20)
				if err := volumes.Pack(".", out); err != nil {
					return err
				}
				return out.Flush()
			},
		},
		&cobra.Command{
			Use: "ready", Short: "Answer that the mover runs", Args: noArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				_, err := os.Stat(".")
				return err
			},
		},
		&cobra.Command{
			Use: "idle", Short: "Wait until the pod is deleted", Args: noArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				<-cmd.Context().Done()
				return context.Cause(cmd.Context())
			},
		},
	)
	return cmd
}
