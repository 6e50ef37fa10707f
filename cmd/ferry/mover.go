package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
	var direct, list bool
	pack := &cobra.Command{
		Use: "pack", Short: "Write a tar stream of the working directory to stdout", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if direct {
				return packDirect(cmd.Context(), streams)
			}
			if list {
				files, err := volumes.List(".")
				if err != nil {
					return err
				}
				return json.NewEncoder(streams.Out).Encode(volumes.ListResult{Files: files})
			}
			out := bufio.NewWriterSize(streams.Out, 1<<20)
			if err := volumes.Pack(".", out); err != nil {
				return err
			}
			return out.Flush()
		},
	}
	pack.Flags().BoolVar(&direct, "direct", false, "upload to storage as the JSON request on stdin's first line says; print the result")
	pack.Flags().BoolVar(&list, "list", false, "print the files with their SHA-256 as one JSON line instead of the tar stream")
	cmd.AddCommand(
		pack,
		newUnpackCommand(streams),
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

// newUnpackCommand writes the zstd-compressed tar stream that pack wrote, read from stdin up to
// the archive's end marker (stdin may never end), into the working directory and prints what it
// did as one JSON line.
func newUnpackCommand(streams genericiooptions.IOStreams) *cobra.Command {
	var opts volumes.UnpackOptions
	var direct bool
	cmd := &cobra.Command{
		Use: "unpack", Short: "Write the compressed tar stream on stdin into the working directory", Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Only root may give files their owners; anyone else leaves them, and the result says so.
			opts.Owners = os.Geteuid() == 0
			if direct {
				return unpackDirect(cmd.Context(), streams, opts)
			}
			res, err := volumes.UnpackCompressed(cmd.Context(), ".", bufio.NewReaderSize(streams.In, 1<<20), opts)
			if err != nil {
				return err
			}
			return json.NewEncoder(streams.Out).Encode(res)
		},
	}
	cmd.Flags().BoolVar(&opts.Delete, "delete", false, "delete what the directory holds that the archive does not")
	cmd.Flags().BoolVar(&direct, "direct", false, "download the archive from storage as the JSON request on stdin's first line says; print the result")
	return cmd
}

// unpackDirect reads only the request's line from stdin, and prints the result also when the
// unpack failed: what it read of the stored file tells ferry whether the backup is to blame.
func unpackDirect(ctx context.Context, streams genericiooptions.IOStreams, opts volumes.UnpackOptions) error {
	line, err := bufio.NewReader(streams.In).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	var req volumes.DirectUnpackRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return badinput.Errorf("request: %v", err)
	}
	res, err := volumes.UnpackDirect(ctx, ".", req, opts)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(streams.Out).Encode(res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	return nil
}
