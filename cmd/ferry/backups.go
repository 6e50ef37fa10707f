package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/human"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func newBackupsCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backups",
		Short: "List and delete the backups in storage",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var output string
	list := &cobra.Command{
		Use:   "list",
		Short: "List backups; incomplete ones (no manifest) are never restorable",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" {
				return badinput.Errorf("--output %q: want json", output)
			}
			store, err := storage.Open(cmd.Context(), global.storageURL)
			if err != nil {
				return err
			}
			infos, err := snapshot.List(cmd.Context(), store)
			if err != nil {
				return err
			}
			if output == "json" {
				data, err := json.MarshalIndent(infos, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(streams.Out, "%s\n", data)
				return err
			}
			w := tabwriter.NewWriter(streams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "NAME\tSTATE\tFILES\tSIZE\tCOMPLETED\n")
			for _, i := range infos {
				completed := "-"
				if !i.CompletedAt.IsZero() {
					completed = i.CompletedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", i.Name, i.State, i.Files, human.Bytes(i.Bytes), completed)
			}
			return w.Flush()
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "", "json for machine-readable output")
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete one backup completely, complete or not",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return badinput.Errorf("ferry backups delete takes one backup name, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return deleteBackup(cmd.Context(), global, streams, args[0])
		},
	}
	cmd.AddCommand(list, del)
	return cmd
}

func deleteBackup(ctx context.Context, global *globalOptions, streams genericiooptions.IOStreams, name string) error {
	store, err := storage.Open(ctx, global.storageURL)
	if err != nil {
		return err
	}
	n, err := snapshot.Delete(ctx, store, name)
	if err != nil {
		return fmt.Errorf("delete backup %s (%d files removed): %w", name, n, err)
	}
	_, err = fmt.Fprintf(streams.Out, "Deleted backup %s (%d files).\n", name, n)
	return err
}
