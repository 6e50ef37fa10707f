package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	pack := &packOptions{streams: streams}
	packCmd := &cobra.Command{
		Use: "pack", Short: "Write a tar stream of the working directory to stdout", Args: noArgs,
		RunE: runE(pack),
	}
	packCmd.Flags().BoolVar(&pack.direct, "direct", false, "upload to storage through the part URLs ferry answers on stdin (JSON lines); print the asks, parts and result")
	packCmd.Flags().BoolVar(&pack.tree, "tree", false, "for a chunked backup: read the previous backup's file stats on stdin (JSON lines, then \"end\"), mark each file's stats, and write unchanged files without their data")
	packCmd.Flags().BoolVar(&pack.list, "list", false, "print the files with their SHA-256 as one JSON line instead of the tar stream")
	cmd.AddCommand(
		packCmd,
		newUnpackCommand(streams),
		&cobra.Command{
			Use: "ready", Short: "Answer that the mover runs", Args: noArgs,
			RunE: runE(moverTask(func(context.Context) error {
				_, err := os.Stat(".")
				return err
			})),
		},
		&cobra.Command{
			Use: "idle", Short: "Wait until the pod is deleted", Args: noArgs,
			RunE: runE(moverTask(func(ctx context.Context) error {
				<-ctx.Done()
				return context.Cause(ctx)
			})),
		},
	)
	return cmd
}

// moverTask is a mover command without flags: nothing to complete or validate.
type moverTask func(context.Context) error

func (t moverTask) complete([]string) error       { return nil }
func (t moverTask) validate() error               { return nil }
func (t moverTask) run(ctx context.Context) error { return t(ctx) }

// packOptions are ferry mover pack's.
type packOptions struct {
	streams            genericiooptions.IOStreams
	direct, list, tree bool
}

func (o *packOptions) complete([]string) error { return nil }

func (o *packOptions) validate() error {
	if o.direct && o.list || o.tree && (o.direct || o.list) {
		return badinput.Errorf("ferry mover pack: --direct, --list and --tree exclude each other")
	}
	return nil
}

// run writes the tar stream to stdout, or with --direct holds the mover's side of the
// conversation with ferry on stdin and stdout (see volumes.PackDirect): stdin may never end.
func (o *packOptions) run(ctx context.Context) error {
	if o.direct {
		return volumes.PackDirect(ctx, ".", o.streams.In, o.streams.Out)
	}
	if o.list {
		return volumes.WriteList(".", o.streams.Out)
	}
	out := bufio.NewWriterSize(o.streams.Out, 1<<20)
	pack := volumes.Pack
	if o.tree {
		pack = func(dir string, w io.Writer) error { return volumes.PackTree(dir, o.streams.In, w) }
	}
	if err := pack(".", out); err != nil {
		return err
	}
	return out.Flush()
}

// unpackOptions are ferry mover unpack's.
type unpackOptions struct {
	streams                     genericiooptions.IOStreams
	opts                        volumes.UnpackOptions
	direct, stage, apply, abort bool
}

// newUnpackCommand puts a volume's archive into the working directory in two steps, so that
// ferry checks the archive between them: --stage reads the zstd-compressed tar stream that pack
// wrote from stdin, up to the archive's end marker (stdin may never end), or with --direct from
// storage, and stages it without changing anything else; --apply puts what was staged in place;
// --abort removes it. --stage prints the staged list, a first line that sums it up and a line
// per entry, and keeps a long one on the volume; --apply and --abort read that first line (and
// the entries of a list not kept) as ferry hands it back on stdin, and --apply prints its result
// the same way.
func newUnpackCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &unpackOptions{streams: streams}
	cmd := &cobra.Command{
		Use: "unpack", Short: "Stage the compressed tar stream on stdin in the working directory, then apply or abort it", Args: noArgs,
		RunE: runE(o),
	}
	cmd.Flags().BoolVar(&o.stage, "stage", false, "stage the archive on stdin (or, with --direct, in storage) and print what was staged")
	cmd.Flags().BoolVar(&o.apply, "apply", false, "put what was staged in place; the staged list is stdin's first line")
	cmd.Flags().BoolVar(&o.abort, "abort", false, "remove what was staged; the staged list is stdin's first line")
	cmd.Flags().BoolVar(&o.opts.Delete, "delete", false, "with --apply, delete what the directory holds that the archive does not")
	cmd.Flags().BoolVar(&o.direct, "direct", false, "with --stage, download the archive through the presigned URL of the JSON request on stdin's first line")
	return cmd
}

// complete: only root may give files their owners; anyone else leaves them, and the result says so.
func (o *unpackOptions) complete([]string) error {
	o.opts.Owners = os.Geteuid() == 0
	return nil
}

func (o *unpackOptions) validate() error {
	switch {
	case o.stage && !o.apply && !o.abort:
	case (o.apply || o.abort) && !o.stage && !o.direct && !(o.apply && o.abort):
	default:
		return badinput.Errorf("ferry mover unpack: give one of --stage (with or without --direct), --apply or --abort")
	}
	return nil
}

func (o *unpackOptions) run(ctx context.Context) error {
	if o.stage {
		if o.direct {
			return unpackDirect(ctx, o.streams)
		}
		st, err := volumes.StageCompressed(ctx, ".", bufio.NewReaderSize(o.streams.In, 1<<20))
		if err != nil {
			return err
		}
		return printStaged(o.streams, &st, &st)
	}
	in := bufio.NewReaderSize(o.streams.In, 1<<16)
	st, err := readStaged(in)
	if err != nil {
		return err
	}
	if o.abort {
		return volumes.Abort(".", st)
	}
	if st, err = volumes.LoadStaged(".", st, in); err != nil {
		return err
	}
	return volumes.ApplyAndPrint(ctx, ".", st, o.opts, o.streams.Out)
}

// printStaged saves what was staged on the volume and prints head, which holds it, and the
// staged list; what cannot be saved is removed.
func printStaged(streams genericiooptions.IOStreams, head any, st *volumes.Staged) error {
	if err := volumes.SaveStaged(".", st); err != nil {
		volumes.Abort(".", *st)
		return err
	}
	out := bufio.NewWriterSize(streams.Out, 1<<16)
	if err := volumes.PrintStaged(out, ".", head, *st); err != nil {
		return err
	}
	return out.Flush()
}

// readStaged reads the staged list's summary from stdin's first line (the list's lines follow
// when it was not saved): stdin may never end.
func readStaged(in *bufio.Reader) (volumes.Staged, error) {
	var st volumes.Staged
	line, err := in.ReadBytes('\n')
	if err != nil {
		return st, fmt.Errorf("read the staged list: %w", err)
	}
	if err := json.Unmarshal(line, &st); err != nil {
		return st, badinput.Errorf("staged list: %v", err)
	}
	return st, nil
}

// unpackDirect reads only the request's line from stdin, and prints the result also when staging
// failed: what it read of the stored file tells ferry whether the backup is to blame.
func unpackDirect(ctx context.Context, streams genericiooptions.IOStreams) error {
	line, err := bufio.NewReader(streams.In).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	var req volumes.DirectUnpackRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return badinput.Errorf("request: %v", err)
	}
	res, err := volumes.StageDirect(ctx, ".", req)
	if err != nil {
		return err
	}
	if res.Error != "" {
		if err := json.NewEncoder(streams.Out).Encode(res); err != nil {
			return err
		}
		return errors.New(res.Error)
	}
	return printStaged(streams, &res, &res.Staged)
}
