package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
	"github.com/ferrykube/ferry/storage/repo"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// checkOptions are ferry check's.
type checkOptions struct {
	global   *globalOptions
	streams  genericiooptions.IOStreams
	readData bool
	sample   float64
	output   *outputFlags
}

func newCheckCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &checkOptions{global: global, streams: streams, output: newOutputFlags("json")}
	cmd := &cobra.Command{
		Use:   "check [--read-data | --sample FRACTION]",
		Short: "Read back the chunk repository's packs and verify them",
		Long: `check reads back packs of the storage's unencrypted chunk repository (where backups keep volume
data in chunks, the default through exec) and verifies them: each pack's name is the SHA-256 of its
bytes, each chunk the index places in it decodes to its ID, and every pack the index names exists.
By default a random share of the packs is read (--sample, at least one pack); --read-data reads all.
Exit codes: 0 no problem found, 1 problems found (listed) or the repository cannot be read, 2 bad flags.`,
		Args: noArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.BoolVar(&o.readData, "read-data", false, "read and verify every pack")
	f.Float64Var(&o.sample, "sample", 0.1, "the share of packs read, in (0,1]")
	o.output.addFlags(f, "json for machine-readable output")
	return cmd
}

func (o *checkOptions) complete([]string) error { return nil }

func (o *checkOptions) validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	if o.sample <= 0 || o.sample > 1 {
		return badinput.Errorf("--sample %g: want a share in (0,1]", o.sample)
	}
	return nil
}

func (o *checkOptions) run(ctx context.Context) error {
	store, err := storage.Open(ctx, o.global.storageURL)
	if err != nil {
		return err
	}
	rp, err := repo.Open(ctx, store, repo.Options{})
	if err != nil {
		return fmt.Errorf("%s: %w", store, err)
	}
	sample := o.sample
	if o.readData {
		sample = 1
	}
	res, cerr := rp.Check(ctx, sample)
	if cerr != nil && !errors.Is(cerr, repo.ErrCorrupt) {
		return cerr
	}
	if done, err := o.output.print(o.streams.Out, res); !done {
		fmt.Fprintf(o.streams.Out, "Read %d packs (%d bytes), %d chunks verified; %d packs no index names.\n", res.Packs, res.Bytes, res.Chunks, res.Unindexed)
		for _, p := range res.Problems {
			fmt.Fprintf(o.streams.Out, "  PROBLEM pack %s %s: %s\n", p.Pack, p.Chunk, p.Problem)
		}
	} else if err != nil {
		return err
	}
	return cerr
}
