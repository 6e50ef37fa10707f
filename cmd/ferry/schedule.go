package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/schedule"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
)

func newScheduleCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Back a cluster up on a schedule, from a CronJob inside it",
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newScheduleCreateCommand(global, streams), newScheduleListCommand(global, streams), newScheduleDeleteCommand(global, streams))
	return cmd
}

// scheduleNamespace is the -n of kubectl's flags, else ferry's own namespace.
func scheduleNamespace(global *globalOptions) string {
	if ns := global.kube.Namespace; ns != nil && *ns != "" {
		return *ns
	}
	return schedule.DefaultNamespace
}

func scheduleClient(global *globalOptions, from string) (kubernetes.Interface, error) {
	cfg, err := global.restConfig(from)
	if err != nil {
		return nil, badinput.Wrap(err)
	}
	return kubernetes.NewForConfig(cfg)
}

// scheduleCreateOptions are ferry schedule create's.
type scheduleCreateOptions struct {
	global           *globalOptions
	streams          genericiooptions.IOStreams
	opts             schedule.Options
	from, configFile string
	dryRun           bool
	output           *outputFlags
	config           config.Config // set by complete
}

func newScheduleCreateCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &scheduleCreateOptions{global: global, streams: streams, output: newOutputFlags("yaml", "json")}
	cmd := &cobra.Command{
		Use:   "create NAME --cron \"0 2 * * *\" --from CONTEXT --storage s3://... [--storage-secret SECRET]",
		Short: "Create a CronJob in the cluster that runs ferry backup on a schedule",
		Long: `create puts into the cluster (--from, in -n NAMESPACE, default ` + schedule.DefaultNamespace + `, created when missing) a
ServiceAccount with the least ferry backup needs, derived from a plan of the cluster made now:

  ClusterRole      get and list on each resource type the backup reads, named one by one (no
                   wildcard, which would match nodes/proxy, pods/proxy, services/proxy): the
                   types that may move, custom resources and Secrets included, and namespaces,
                   pods, claims, volumes, storage classes, quotas and CRDs, which locate the data
  Role, in each    create, watch and delete pods (mover pods), exec into pods (ferry mover pack,
  namespace of     the database dumps), port-forward (bucket copies), get Secrets (the
  claims, data-    credentials a database or bucket names); nowhere else
  bases, buckets

a ConfigMap for -f ferry.yaml, and a CronJob (concurrencyPolicy Forbid, --starting-deadline and
--active-deadline so that a stuck run cannot block the later ones, the ferry image, non-root,
read-only root file system) running

  ferry backup --storage URL --schedule NAME ...

with the pod's in-cluster credentials. A type or data namespace the cluster gains later is not
covered: the backup fails naming it; delete the schedule and create it again. Its backups are
named NAME-YYYYMMDD-HHMMSS and record the schedule in their manifest (ferry restore --backup
latest:NAME, ferry prune --schedule NAME). The S3 credentials come from the Secret
--storage-secret names, keys ` + schedule.AccessKeyKey + ` and ` + schedule.SecretKeyKey + `, as environment variables;
they are never written into the CronJob. --dry-run prints the manifests (-o yaml or json) and
creates nothing; when it cannot reach the cluster they hold ferry's built-in list of types and
no Roles.`,
		Args: oneArg("schedule create", "schedule name", ""),
		RunE: runE(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.opts.Cron, "cron", "", "when to back up, a cron expression in the controller manager's time zone, e.g. \"0 2 * * *\" or @daily")
	f.StringVar(&o.from, "from", "", "kubeconfig context of the cluster to back up, where the CronJob runs (default: the current context)")
	f.StringVar(&o.opts.Image, "image", schedule.ImageRepository+":"+buildinfo.Read().Version, "the ferry image the job and its mover pods run")
	f.StringVar(&o.opts.StorageSecret, "storage-secret", "", "Secret in the namespace holding the S3 credentials ("+schedule.AccessKeyKey+", "+schedule.SecretKeyKey+"); omit when the pod gets them another way")
	f.StringVar(&o.opts.Preset, "preset", "", "embedded platform preset: "+strings.Join(config.Presets(), ", "))
	f.StringVarP(&o.configFile, "config", "f", "", "ferry.yaml for the backups, kept in a ConfigMap beside the CronJob")
	f.StringSliceVar(&o.opts.EncryptTo, "encrypt-to", nil, "age recipients (age1...) to encrypt the backups to")
	f.BoolVar(&o.opts.MoverDirect, "mover-direct", false, "mover pods upload volumes to storage themselves")
	f.StringVar(&o.opts.VolumeFormat, "volume-format", "", "ferry backup's --volume-format: chunks (the default through exec when not encrypted: deduplicated, incremental) or tar")
	f.IntVar(&o.opts.Parallel, "parallel", 0, "resource types listed and bucket objects copied at once (default: ferry backup's)")
	f.BoolVar(&o.opts.Suspend, "suspend", false, "create the CronJob suspended")
	f.DurationVar(&o.opts.ActiveDeadline, "active-deadline", schedule.DefaultActiveDeadline, "a run that takes longer is stopped (the Job's activeDeadlineSeconds), so it cannot block the later ones")
	f.DurationVar(&o.opts.StartingDeadline, "starting-deadline", schedule.DefaultStartingDeadline, "a run missed by more than this is skipped until the next (the CronJob's startingDeadlineSeconds)")
	f.StringToStringVar(&o.opts.ServiceAccountAnnotations, "service-account-annotation", nil, "annotations of the ServiceAccount (KEY=VALUE), e.g. for a cloud web identity that gives the pod S3 credentials")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the manifests and create nothing")
	o.output.addFlags(f, "yaml or json: print the manifests")
	return cmd
}

// complete reads ferry.yaml, as ferry backup would, so that a bad file fails now, not at 2 a.m.
func (o *scheduleCreateOptions) complete(args []string) error {
	o.opts.Name, o.opts.Namespace, o.opts.Storage = args[0], scheduleNamespace(o.global), o.global.storageURL
	if o.configFile != "" {
		data, err := os.ReadFile(o.configFile)
		if err != nil {
			return badinput.Errorf("-f %s: %w", o.configFile, err)
		}
		o.opts.Config = data
	}
	var err error
	o.config, err = loadConfig(o.configFile, o.opts.Preset)
	return err
}

func (o *scheduleCreateOptions) validate() error {
	if err := o.output.validate(); err != nil {
		return err
	}
	// The storage URL and the recipients go into the CronJob: checked as ferry backup would, so
	// that a secret given by mistake is refused, not written into the cluster.
	if err := storage.CheckURL(o.opts.Storage); err != nil {
		return err
	}
	if _, err := snapshot.ParseRecipients(o.opts.EncryptTo); err != nil {
		return flagged(err)
	}
	return flagged(o.opts.Check())
}

func (o *scheduleCreateOptions) run(ctx context.Context) error {
	streams, from := o.streams, o.from
	var err error
	// The job's rights come from the plan of the cluster: the types it reads, the namespaces of
	// its data. A dry run that cannot reach the cluster shows the built-in list.
	o.opts.Reads, o.opts.DataNamespaces, err = scheduleAccess(ctx, o.global, from, o.config)
	if err != nil {
		if !o.dryRun {
			return fmt.Errorf("plan %s for the schedule's rights: %w", orCurrent(from), err)
		}
		fmt.Fprintf(streams.ErrOut, "Cannot plan %s (%v): the manifests read ferry's built-in types and give no namespace pod rights; create plans the cluster.\n", orCurrent(from), err)
	}
	m, err := schedule.Build(o.opts)
	if err != nil {
		return err
	}
	if o.dryRun || o.output.format != "" {
		if err := printManifests(streams, m, o.output.format); err != nil || o.dryRun {
			return err
		}
	}
	client, err := scheduleClient(o.global, from)
	if err != nil {
		return err
	}
	done, err := schedule.Apply(ctx, client, m)
	if o.output.format == "" {
		for _, d := range done {
			fmt.Fprintln(streams.Out, d)
		}
	}
	if err != nil {
		return fmt.Errorf("schedule %s in %s: %w", o.opts.Name, orCurrent(from), err)
	}
	out := streams.Out
	if o.output.format != "" {
		out = streams.ErrOut
	}
	fmt.Fprintf(out, "Schedule %s in namespace %s runs %q: ferry %s\n", o.opts.Name, o.opts.Namespace, o.opts.Cron, strings.Join(schedule.Args(o.opts), " "))
	fmt.Fprintf(out, "Its ServiceAccount reads %d resource types and runs pods only in %s; a type or data namespace added later needs the schedule made again.\n",
		len(o.opts.Reads), orNone(o.opts.DataNamespaces))
	warnMissingSecret(ctx, client, out, o.opts)
	return nil
}

func printManifests(streams genericiooptions.IOStreams, m *schedule.Manifests, format string) error {
	if format == "json" {
		data, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": m.Objects()}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(streams.Out, "%s\n", data)
		return err
	}
	data, err := m.YAML()
	if err != nil {
		return err
	}
	_, err = streams.Out.Write(data)
	return err
}

// warnMissingSecret says so when the storage Secret is not there yet: the job's pod would not start.
func warnMissingSecret(ctx context.Context, client kubernetes.Interface, out io.Writer, o schedule.Options) {
	if o.StorageSecret == "" {
		fmt.Fprintf(out, "No --storage-secret: the job's pod must get S3 credentials another way (a web identity on its ServiceAccount, say).\n")
		return
	}
	_, err := client.CoreV1().Secrets(o.Namespace).Get(ctx, o.StorageSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		fmt.Fprintf(out, "Secret %s/%s does not exist yet; the job's pod will not start without it:\n  kubectl -n %s create secret generic %s --from-literal=%s=... --from-literal=%s=...\n",
			o.Namespace, o.StorageSecret, o.Namespace, o.StorageSecret, schedule.AccessKeyKey, schedule.SecretKeyKey)
	}
}

// scheduleListOptions are ferry schedule list's.
type scheduleListOptions struct {
	global  *globalOptions
	streams genericiooptions.IOStreams
	from    string
	all     bool
	output  *outputFlags
}

func newScheduleListCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &scheduleListOptions{global: global, streams: streams, output: newOutputFlags("json")}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List ferry's schedules: cron, suspended, last run and last success",
		Args:  noArgs,
		RunE:  runE(o),
	}
	cmd.Flags().StringVar(&o.from, "from", "", "kubeconfig context of the cluster (default: the current context)")
	cmd.Flags().BoolVarP(&o.all, "all-namespaces", "A", false, "schedules of every namespace")
	o.output.addFlags(cmd.Flags(), "json for machine-readable output")
	return cmd
}

func (o *scheduleListOptions) complete([]string) error { return nil }

func (o *scheduleListOptions) validate() error { return o.output.validate() }

func (o *scheduleListOptions) run(ctx context.Context) error {
	client, err := scheduleClient(o.global, o.from)
	if err != nil {
		return err
	}
	ns := scheduleNamespace(o.global)
	if o.all {
		ns = ""
	}
	infos, err := schedule.List(ctx, client, ns)
	if err != nil {
		return err
	}
	if done, err := o.output.print(o.streams.Out, infos); done {
		return err
	}
	w := tabwriter.NewWriter(o.streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "NAMESPACE\tNAME\tCRON\tSUSPENDED\tACTIVE\tLAST RUN\tLAST SUCCESS\tSTORAGE\n")
	for _, i := range infos {
		fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%d\t%s\t%s\t%s\n", i.Namespace, i.Name, i.Cron, i.Suspended, i.Active, orDash(i.LastRun), orDash(i.LastSuccess), i.Storage)
	}
	return w.Flush()
}

func orDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// scheduleDeleteOptions are ferry schedule delete's.
type scheduleDeleteOptions struct {
	global     *globalOptions
	streams    genericiooptions.IOStreams
	from, name string
}

func newScheduleDeleteCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	o := &scheduleDeleteOptions{global: global, streams: streams}
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule: its CronJob (and Jobs), ConfigMap, RBAC and ServiceAccount; backups stay",
		Args:  oneArg("schedule delete", "schedule name", ""),
		RunE:  runE(o),
	}
	cmd.Flags().StringVar(&o.from, "from", "", "kubeconfig context of the cluster (default: the current context)")
	return cmd
}

func (o *scheduleDeleteOptions) complete(args []string) error { o.name = args[0]; return nil }

func (o *scheduleDeleteOptions) validate() error { return schedule.CheckName(o.name) }

func (o *scheduleDeleteOptions) run(ctx context.Context) error {
	client, err := scheduleClient(o.global, o.from)
	if err != nil {
		return err
	}
	ns := scheduleNamespace(o.global)
	done, err := schedule.Delete(ctx, client, ns, o.name)
	for _, d := range done {
		fmt.Fprintln(o.streams.Out, d)
	}
	if err != nil {
		return fmt.Errorf("delete schedule %s in namespace %s: %w", o.name, ns, err)
	}
	_, err = fmt.Fprintf(o.streams.Out, "Schedule %s is deleted; its backups stay in storage (ferry prune --schedule %s removes them by policy).\n", o.name, o.name)
	return err
}

// scheduleAccess plans the cluster as the scheduled backup will: the resource types it reads and
// the namespaces of its claims, databases and buckets, sorted.
func scheduleAccess(ctx context.Context, global *globalOptions, from string, cfg config.Config) ([]schema.GroupResource, []string, error) {
	cl, err := global.planClients(from)
	if err != nil {
		return nil, nil, badinput.Wrap(err)
	}
	reads, err := plans.Readable(cl.Discovery, cfg.Planning)
	if err != nil {
		return nil, nil, err
	}
	p, err := plans.Inventory(ctx, cl, plans.Options{Config: cfg.Planning, Context: from, Log: global.logger})
	if err != nil {
		return nil, nil, err
	}
	namespaces := map[string]bool{}
	for _, v := range p.Volumes {
		namespaces[v.Namespace] = true
	}
	for _, d := range slices.Concat(p.Databases, p.Buckets) {
		if d.Namespace != "" {
			namespaces[d.Namespace] = true
		}
	}
	return reads, slices.Sorted(maps.Keys(namespaces)), nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "no namespace"
	}
	return strings.Join(names, ", ")
}
