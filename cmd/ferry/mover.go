package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot/volumes"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// newMoverCommand is what runs inside mover pods; it works on its working directory, the claim's
// mount, so that the same command serves real pods and the testbed.
func newMoverCommand(streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{Use: "mover", Hidden: true, Short: "Runs in mover pods", Args: noArgs}
	var direct bool
	pack := &cobra.Command{
		Use: "pack", Short: "Write a tar stream of the working directory to stdout", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if direct {
				return packDirect(cmd.Context(), streams)
			}
			out := bufio.NewWriterSize(streams.Out, 1<<20)
			if err := volumes.Pack(".", out); err != nil {
				return err
			}
			return out.Flush()
		},
	}
	pack.Flags().BoolVar(&direct, "direct", false, "upload to storage as the JSON request on stdin's first line says; print the result")
	cmd.AddCommand(
		pack,
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

// packDirect reads only the request's line from stdin: the exec's stdin may never end.
func packDirect(ctx context.Context, streams genericiooptions.IOStreams) error {
	line, err := bufio.NewReader(streams.In).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	var req volumes.DirectRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return badinput.Errorf("request: %v", err)
	}
	res, err := volumes.PackDirect(ctx, ".", req)
	if err != nil {
		return err
	}
	return json.NewEncoder(streams.Out).Encode(res)
}
