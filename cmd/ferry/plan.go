package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans"
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

type planOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams

	from, to           string
	configFile, preset string
	output             string
	include, exclude   plans.Selection
	storageClassMap    []string
	namespaceMap       []string
	concurrency        int
	upgrade            bool
	leaveBehind        []string

	config plans.Config // set by complete
}

func newPlanCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &planOptions{global: global, streams: streams}
	cmd := &cobra.Command{
		Use:   "plan --from CONTEXT [--to CONTEXT]",
		Short: "Inventory a cluster, order what moves, estimate it, and check the target",
		Long: `plan lists every resource type the source serves, counts what would move by type and namespace,
records what does not move and why, finds volumes, databases and buckets, orders the restore in waves,
estimates the time, and with --to checks the target. Exit code 3 when a finding blocks the move.

With --upgrade, --to is a green cluster that runs the platform's new release: the plan also says
what moves as state, what is left to green's release (the platform section of the preset or
ferry.yaml), and how green's release differs from blue's (CRDs, components, images). Objects
whose kind green's release removed block, by name, unless --leave-behind names their CRD.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "kubeconfig context of the source cluster (default: the current context)")
	f.StringVar(&o.to, "to", "", "kubeconfig context of the target cluster, to preflight it")
	f.StringVarP(&o.configFile, "config", "f", "", "ferry.yaml with databases, buckets, selections and mappings")
	f.StringVar(&o.preset, "preset", "", "embedded platform preset: "+strings.Join(plans.Presets(), ", "))
	f.StringVarP(&o.output, "output", "o", "", "yaml or json to print the plan, or a file (.yaml, .yml, .json) to write it to; default: a summary")
	f.StringSliceVar(&o.include.Namespaces, "include-namespaces", nil, "namespaces to include (default all)")
	f.StringSliceVar(&o.exclude.Namespaces, "exclude-namespaces", nil, "namespaces to leave out")
	f.StringSliceVar(&o.include.Resources, "include-resources", nil, "resources to include, e.g. configmaps,profiles.kubeflow.org (default all)")
	f.StringSliceVar(&o.exclude.Resources, "exclude-resources", nil, "resources to leave out")
	f.StringVarP(&o.include.LabelSelector, "selector", "l", "", "only objects with these labels (CRDs and namespaces always move)")
	f.StringSliceVar(&o.storageClassMap, "storage-class-map", nil, "storage classes to change on the target, OLD=NEW")
	f.StringSliceVar(&o.namespaceMap, "namespace-map", nil, "namespaces to rename on the target, OLD=NEW")
	f.IntVar(&o.concurrency, "concurrency", 8, "resource types listed at once")
	addUpgradeFlags(cmd, &o.upgrade, &o.leaveBehind)
	return cmd
}

func (o *planOptions) complete() error {
	cfg, err := plans.LoadConfig(o.configFile, o.preset)
	if err != nil {
		return err
	}
	flags := plans.Config{Include: o.include, Exclude: o.exclude}
	if flags.StorageClassMap, err = parseMap("--storage-class-map", o.storageClassMap); err != nil {
		return err
	}
	if flags.NamespaceMap, err = parseMap("--namespace-map", o.namespaceMap); err != nil {
		return err
	}
	o.config = cfg.Merge(flags)
	return nil
}

func (o *planOptions) validate() error {
	if err := o.config.Validate(); err != nil {
		return badinput.Errorf("flags: %w", err)
	}
	if o.concurrency < 1 {
		return badinput.Errorf("--concurrency %d: want 1 or more", o.concurrency)
	}
	switch {
	case o.output == "", o.output == "yaml", o.output == "json":
	case strings.HasSuffix(o.output, ".yaml"), strings.HasSuffix(o.output, ".yml"), strings.HasSuffix(o.output, ".json"):
	default:
		return badinput.Errorf("--output %q: want yaml, json or a file name ending in .yaml, .yml or .json", o.output)
	}
	if o.from != "" && o.from == o.to {
		return badinput.Errorf("--from and --to name the same context %q", o.from)
	}
	if o.upgrade && o.to == "" {
		return badinput.Errorf("--upgrade needs --to: the green cluster that runs the new release")
	}
	return validateUpgrade(o.upgrade, o.leaveBehind, o.config)
}

// validateUpgrade checks --upgrade and --leave-behind, of plan and migrate alike.
func validateUpgrade(upgrade bool, leaveBehind []string, cfg plans.Config) error {
	if len(leaveBehind) > 0 && !upgrade {
		return badinput.Errorf("--leave-behind needs --upgrade")
	}
	for _, lb := range leaveBehind {
		if plural, group, ok := strings.Cut(lb, "."); !ok || plural == "" || group == "" || strings.ContainsAny(lb, " /") {
			return badinput.Errorf("--leave-behind %q: want a CRD's name, such as pytorchjobs.kubeflow.org", lb)
		}
	}
	if upgrade && cfg.Platform.IsZero() {
		return badinput.Errorf("--upgrade: no platform section says what green's release installs; use a preset that has one (--preset kubeflow) or add platform to ferry.yaml")
	}
	return nil
}

// addUpgradeFlags adds --upgrade and --leave-behind, of plan and migrate alike.
func addUpgradeFlags(cmd *cobra.Command, upgrade *bool, leaveBehind *[]string) {
	f := cmd.Flags()
	f.BoolVar(upgrade, "upgrade", false, "--to runs the platform's new release: move the state only, and compare the releases")
	f.StringSliceVar(leaveBehind, "leave-behind", nil, "with --upgrade, CRDs green's release removed (e.g. pytorchjobs.kubeflow.org) whose objects stay on blue")
}

func (o *planOptions) run(ctx context.Context) error {
	source, err := o.global.planClients(o.from)
	if err != nil {
		return badinput.Wrap(err)
	}
	o.global.logger.Info("planning", "from", orCurrent(o.from))
	p, err := plans.Inventory(ctx, source, plans.Options{Config: o.config, Context: o.from, Concurrency: o.concurrency, Log: o.global.logger})
	if err != nil {
		return fmt.Errorf("plan %s: %w", orCurrent(o.from), err)
	}
	var target *plans.Clients
	if o.to != "" {
		t, err := o.global.planClients(o.to)
		if err != nil {
			return badinput.Wrap(err)
		}
		if o.upgrade {
			if err := plans.PlanUpgrade(ctx, p, source, t, plans.UpgradeOptions{LeaveBehind: o.leaveBehind}); err != nil {
				return err
			}
		}
		if err := plans.Preflight(ctx, p, t, o.to); err != nil {
			return err
		}
		target = &t
	}
	// As many movers at once as ferry backup and restore run by default (--parallel 8).
	if err := plans.PreflightMovers(ctx, p, source, target, 8); err != nil {
		return err
	}
	switch o.output {
	case "yaml", "json":
		data, err := p.Marshal(o.output)
		if err != nil {
			return err
		}
		if _, err := o.streams.Out.Write(data); err != nil {
			return err
		}
	case "":
		if err := p.WriteSummary(o.streams.Out); err != nil {
			return err
		}
	default:
		if err := p.WriteFile(o.output); err != nil {
			return err
		}
		if err := p.WriteSummary(o.streams.Out); err != nil {
			return err
		}
		fmt.Fprintf(o.streams.Out, "\nThe full plan is in %s.\n", o.output)
	}
	if blocking := p.Blocking(); len(blocking) > 0 {
		return &incompleteError{msg: fmt.Sprintf("%d blocking findings; the first: %s: %s", len(blocking), blocking[0].Subject, blocking[0].Message)}
	}
	return nil
}

func orCurrent(ctx string) string {
	if ctx == "" {
		return "the current context"
	}
	return "context " + ctx
}

func parseMap(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, p := range pairs {
		from, to, ok := strings.Cut(p, "=")
		if !ok || from == "" || to == "" {
			return nil, badinput.Errorf("%s %q: want OLD=NEW", flag, p)
		}
		m[from] = to
	}
	return m, nil
}
