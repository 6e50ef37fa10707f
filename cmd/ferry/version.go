package main

import (
	"context"
	"fmt"

	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

type versionOptions struct {
	streams genericiooptions.IOStreams
	output  *outputFlags
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &versionOptions{streams: streams, output: newOutputFlags("json", "yaml")}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print ferry's version",
		Args:  noArgs,
		RunE:  runE(o),
	}
	o.output.addFlags(cmd.Flags(), "output format: json or yaml (default: one line)")
	return cmd
}

func (o *versionOptions) complete([]string) error { return nil }

func (o *versionOptions) validate() error { return o.output.validate() }

func (o *versionOptions) run(context.Context) error {
	info := buildinfo.Read()
	if done, err := o.output.print(o.streams.Out, info); done {
		return err
	}
	line := "ferry " + info.Version
	if commit := info.Commit; commit != "" {
		if len(commit) > 12 {
			commit = commit[:12]
		}
		if info.Modified {
			commit += "-dirty"
		}
		line += " commit " + commit
	}
	_, err := fmt.Fprintf(o.streams.Out, "%s (%s, %s)\n", line, info.GoVersion, info.Platform)
	return err
}
