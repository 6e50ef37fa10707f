package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

type planOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams

	from, to           string
	configFile, preset string
	output             *outputFlags
	selection          selectionFlags
	mapping            mappingFlags
	concurrency        int
	upgrade            upgradeFlags
	movers             moverFlags

	config config.Config // set by complete
}

func newPlanCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &planOptions{global: global, streams: streams, output: &outputFlags{formats: []string{"yaml", "json"}, files: true}}
	cmd := &cobra.Command{
		Use:   "plan --from CONTEXT [--to CONTEXT]",
		Short: "Inventory a cluster, order what moves, estimate it, and check the target",
		Long: `plan lists every resource type the source serves, counts what would move by type and namespace,
records what does not move and why, finds volumes, databases and buckets, orders the restore in waves,
estimates the time, and with --to checks the target. Exit code 3 when a finding blocks the move.
The selection flags narrow the databases and buckets too: those of namespaces they leave out are
listed as not moved.

With --upgrade, --to is a green cluster that runs the platform's new release: the plan also says
what moves as state, what is left to green's release (the platform section of the preset or
ferry.yaml), and how green's release differs from blue's (CRDs, components, images). Objects
whose kind green's release removed block, by name, unless --leave-behind names their CRD.`,
		Args: noArgs,
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "kubeconfig context of the source cluster (default: the current context)")
	f.StringVar(&o.to, "to", "", "kubeconfig context of the target cluster, to preflight it")
	f.StringVarP(&o.configFile, "config", "f", "", "ferry.yaml with databases, buckets, selections and mappings")
	f.StringVar(&o.preset, "preset", "", "embedded platform preset: "+strings.Join(config.Presets(), ", "))
	o.output.addFlags(f, "yaml or json to print the plan, or a file (.yaml, .yml, .json) to write it to; default: a summary")
	o.selection.addFlags(f)
	o.mapping.addFlags(f)
	f.IntVar(&o.concurrency, "concurrency", 8, "resource types listed at once")
	o.upgrade.addFlags(f)
	o.movers.addFlags(f, "")
	return cmd
}

// loadConfig reads ferry.yaml and the preset, naming --preset when the flag gave it.
func loadConfig(configFile, preset string) (config.Config, error) {
	cfg, err := config.LoadConfig(configFile, preset)
	if err != nil && preset != "" {
		return cfg, flagged(err)
	}
	return cfg, err
}

func (o *planOptions) complete([]string) error {
	cfg, err := loadConfig(o.configFile, o.preset)
	if err != nil {
		return err
	}
	flags := o.selection.config()
	m, err := o.mapping.mapping()
	if err != nil {
		return err
	}
	flags.NamespaceMap, flags.StorageClassMap = m.Namespaces, m.StorageClasses
	o.config = cfg.Merge(flags)
	return nil
}

func (o *planOptions) validate() error {
	// The flags' selection and maps over ferry.yaml's, checked as one configuration.
	if err := o.config.Validate(); err != nil {
		return badinput.Errorf("flags: %w", err)
	}
	if o.concurrency < 1 {
		return badinput.Errorf("--concurrency %d: want 1 or more", o.concurrency)
	}
	if err := o.output.validate(); err != nil {
		return err
	}
	if o.from != "" && o.from == o.to {
		return badinput.Errorf("--from and --to name the same context %q", o.from)
	}
	if o.upgrade.on && o.to == "" {
		return badinput.Errorf("--upgrade needs --to: the green cluster that runs the new release")
	}
	return o.upgrade.validate(o.config)
}

// upgradeFlags are --upgrade and --leave-behind, of plan and migrate alike.
type upgradeFlags struct {
	on          bool
	leaveBehind []string
}

func (u *upgradeFlags) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&u.on, "upgrade", false, "--to runs the platform's new release: move the state only, and compare the releases")
	f.StringSliceVar(&u.leaveBehind, "leave-behind", nil, "with --upgrade, CRDs green's release removed (e.g. pytorchjobs.kubeflow.org) whose objects stay on blue")
}

func (u *upgradeFlags) isSet() bool { return u.on || len(u.leaveBehind) > 0 }

// validate checks the flags against the configuration, which must say what green's release installs.
func (u *upgradeFlags) validate(cfg config.Config) error {
	upgrade, leaveBehind := u.on, u.leaveBehind
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

func (o *planOptions) run(ctx context.Context) error {
	source, err := o.global.planClients(o.from)
	if err != nil {
		return badinput.Wrap(err)
	}
	o.global.logger.Info("planning", "from", orCurrent(o.from))
	data, err := o.selection.dataFilter()
	if err != nil {
		return err
	}
	p, err := plans.Inventory(ctx, source, plans.Options{Config: o.config.Planning, Context: o.from, Concurrency: o.concurrency, Data: data, Log: o.global.logger})
	if err != nil {
		return fmt.Errorf("plan %s: %w", orCurrent(o.from), err)
	}
	var target *plans.Clients
	if o.to != "" {
		t, err := o.global.planClients(o.to)
		if err != nil {
			return badinput.Wrap(err)
		}
		if o.upgrade.on {
			if err := plans.PlanUpgrade(ctx, p, source, t, plans.UpgradeOptions{LeaveBehind: o.upgrade.leaveBehind}); err != nil {
				return flagged(err)
			}
		}
		if err := plans.Preflight(ctx, p, t, o.to); err != nil {
			return err
		}
		if err := o.preflightDatabases(ctx, p); err != nil {
			return err
		}
		if err := plans.PreflightPods(ctx, p, source, t); err != nil {
			return err
		}
		target = &t
	}
	if err := o.quiescePlan(ctx, p); err != nil {
		return err
	}
	// As many movers at once as ferry backup and restore run by default (--parallel 8).
	if err := plans.PreflightQuotas(ctx, p, source, target, 8); err != nil {
		return err
	}
	if err := o.preflightMovers(ctx, p); err != nil {
		return err
	}
	switch {
	case o.output.structured():
		data, err := p.Marshal(o.output.format)
		if err != nil {
			return err
		}
		if _, err := o.streams.Out.Write(data); err != nil {
			return err
		}
	case o.output.format == "":
		if err := p.WriteSummary(o.streams.Out); err != nil {
			return err
		}
	default:
		if err := p.WriteFile(o.output.format); err != nil {
			return err
		}
		if err := p.WriteSummary(o.streams.Out); err != nil {
			return err
		}
		fmt.Fprintf(o.streams.Out, "\nThe full plan is in %s.\n", o.output.format)
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

// quiescePlan lists in the plan what a migration's quiesce would stop or pause on the source
// (migrate.QuiescePlan): ferry.yaml's rules' objects, the writers of claims whose files move, the
// autoscalers and GitOps objects paused with them.
func (o *planOptions) quiescePlan(ctx context.Context, p *plans.Plan) error {
	source, err := o.global.cluster(o.from)
	if err != nil {
		return err
	}
	items, err := migrate.QuiescePlan(ctx, source, p, o.global.logger)
	if err != nil {
		// The plan stands without it: ferry.yaml's rules' objects are listed, and a run finds the rest.
		p.Findings = append(p.Findings, plans.Finding{Severity: plans.Warning, Subject: "quiesce",
			Message: "what a migration's quiesce would stop beside ferry.yaml's rules could not be read: " + err.Error()})
		return nil
	}
	p.Quiesce = items
	return nil
}

// preflightMovers adds where the source's admission, and the target's, would refuse the mover
// pods (kinds.PreflightMovers) to the plan's findings, as a migration's preflight does.
func (o *planOptions) preflightMovers(ctx context.Context, p *plans.Plan) error {
	if len(p.FileClaims(nil)) == 0 {
		return nil
	}
	source, err := o.global.cluster(o.from)
	if err != nil {
		return err
	}
	var target *kinds.Cluster
	if o.to != "" {
		t, err := o.global.cluster(o.to)
		if err != nil {
			return err
		}
		target = &t
	}
	findings, err := kinds.PreflightMovers(ctx, p, o.movers.image, source, target, snapshot.Mapping{})
	if err != nil {
		return fmt.Errorf("preflight of the mover pods: %w", err)
	}
	p.Findings = append(p.Findings, findings...)
	return nil
}

// preflightDatabases adds what the target's database servers could not take of the source's
// dumps to the plan's findings (kinds.PreflightDatabases), as a migration's preflight does.
func (o *planOptions) preflightDatabases(ctx context.Context, p *plans.Plan) error {
	if len(p.Databases) == 0 {
		return nil
	}
	source, err := o.global.cluster(o.from)
	if err != nil {
		return err
	}
	target, err := o.global.cluster(o.to)
	if err != nil {
		return err
	}
	findings, err := kinds.PreflightDatabases(ctx, p, source, target, snapshot.Mapping{})
	if err != nil {
		return fmt.Errorf("preflight of the databases: %w", err)
	}
	p.Findings = append(p.Findings, findings...)
	return nil
}
