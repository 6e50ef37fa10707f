package main

import (
	"fmt"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

type versionOptions struct {
	output  string
	streams genericiooptions.IOStreams
}

func newVersionCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &versionOptions{streams: streams}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print ferry's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return o.run()
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "output format: json or yaml (default: one line)")
	return cmd
}

func (o *versionOptions) validate() error {
	switch o.output {
	case "", "json", "yaml":
		return nil
	}
	return badinput.Errorf("--output %q: want json or yaml", o.output)
}

func (o *versionOptions) run() error {
	info := buildinfo.Read()
	if done, err := printStructured(o.streams.Out, o.output, info); done {
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

// noArgs rejects positional arguments as bad input.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return badinput.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}
