package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/schedule"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

func oneName(command string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return badinput.Errorf("ferry schedule %s takes one schedule name, got %d arguments", command, len(args))
		}
		return nil
	}
}

func newScheduleCreateCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	var o schedule.Options
	var from, configFile, output string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "create NAME --cron \"0 2 * * *\" --from CONTEXT --storage s3://... [--storage-secret SECRET]",
		Short: "Create a CronJob in the cluster that runs ferry backup on a schedule",
		Long: `create puts into the cluster (--from, in -n NAMESPACE, default ` + schedule.DefaultNamespace + `, created when missing) a
ServiceAccount, a ClusterRole and ClusterRoleBinding with what ferry backup needs (get and list on
everything it moves; create, watch and delete pods, exec and port-forward for mover pods, dumps and
bucket copies), a ConfigMap for -f ferry.yaml, and a CronJob (concurrencyPolicy Forbid, the ferry
image, non-root, read-only root file system) running

  ferry backup --storage URL --schedule NAME ...

with the pod's in-cluster credentials. Its backups are named NAME-YYYYMMDD-HHMMSS and record the
schedule in their manifest (ferry restore --backup latest:NAME, ferry prune --schedule NAME).
The S3 credentials come from the Secret --storage-secret names, keys ` + schedule.AccessKeyKey + ` and
` + schedule.SecretKeyKey + `, as environment variables; they are never written into the CronJob.
--dry-run prints the manifests (-o yaml or json) and creates nothing.`,
		Args: oneName("create"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name, o.Namespace, o.Storage = args[0], scheduleNamespace(global), global.storageURL
			switch output {
			case "", "yaml", "json":
			default:
				return badinput.Errorf("--output %q: want yaml or json", output)
			}
			if configFile != "" {
				// Checked here as ferry backup would read it, so a bad file fails now, not at 2 a.m.
				if _, err := plans.LoadConfig(configFile, ""); err != nil {
					return err
				}
				data, err := os.ReadFile(configFile)
				if err != nil {
					return badinput.Errorf("-f %s: %w", configFile, err)
				}
				o.Config = data
			}
			if o.Preset != "" {
				if _, err := plans.LoadConfig("", o.Preset); err != nil {
					return err
				}
			}
			m, err := schedule.Build(o)
			if err != nil {
				return err
			}
			if dryRun || output != "" {
				if err := printManifests(streams, m, output); err != nil || dryRun {
					return err
				}
			}
			client, err := scheduleClient(global, from)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			done, err := schedule.Apply(ctx, client, m)
			if output == "" {
				for _, d := range done {
					fmt.Fprintln(streams.Out, d)
				}
			}
			if err != nil {
				return fmt.Errorf("schedule %s in %s: %w", o.Name, orCurrent(from), err)
			}
			out := streams.Out
			if output != "" {
				out = streams.ErrOut
			}
			fmt.Fprintf(out, "Schedule %s in namespace %s runs %q: ferry %s\n", o.Name, o.Namespace, o.Cron, strings.Join(schedule.Args(o), " "))
			warnMissingSecret(ctx, client, out, o)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Cron, "cron", "", "when to back up, a cron expression in the controller manager's time zone, e.g. \"0 2 * * *\" or @daily")
	f.StringVar(&from, "from", "", "kubeconfig context of the cluster to back up, where the CronJob runs (default: the current context)")
	f.StringVar(&o.Image, "image", schedule.ImageRepository+":"+buildinfo.Read().Version, "the ferry image the job and its mover pods run")
	f.StringVar(&o.StorageSecret, "storage-secret", "", "Secret in the namespace holding the S3 credentials ("+schedule.AccessKeyKey+", "+schedule.SecretKeyKey+"); omit when the pod gets them another way")
	f.StringVar(&o.Preset, "preset", "", "embedded platform preset: "+strings.Join(plans.Presets(), ", "))
	f.StringVarP(&configFile, "config", "f", "", "ferry.yaml for the backups, kept in a ConfigMap beside the CronJob")
	f.StringSliceVar(&o.EncryptTo, "encrypt-to", nil, "age recipients (age1...) to encrypt the backups to")
	f.BoolVar(&o.MoverDirect, "mover-direct", false, "mover pods upload volumes to storage themselves")
	f.IntVar(&o.Parallel, "parallel", 0, "resource types listed and bucket objects copied at once (default: ferry backup's)")
	f.BoolVar(&o.Suspend, "suspend", false, "create the CronJob suspended")
	f.StringToStringVar(&o.ServiceAccountAnnotations, "service-account-annotation", nil, "annotations of the ServiceAccount (KEY=VALUE), e.g. for a cloud web identity that gives the pod S3 credentials")
	f.BoolVar(&dryRun, "dry-run", false, "print the manifests and create nothing")
	f.StringVarP(&output, "output", "o", "", "yaml or json: print the manifests")
	return cmd
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

func newScheduleListCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	var from, output string
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List ferry's schedules: cron, suspended, last run and last success",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" {
				return badinput.Errorf("--output %q: want json", output)
			}
			client, err := scheduleClient(global, from)
			if err != nil {
				return err
			}
			ns := scheduleNamespace(global)
			if all {
				ns = ""
			}
			infos, err := schedule.List(cmd.Context(), client, ns)
			if err != nil {
				return err
			}
			if done, err := printStructured(streams.Out, output, infos); done {
				return err
			}
			w := tabwriter.NewWriter(streams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "NAMESPACE\tNAME\tCRON\tSUSPENDED\tACTIVE\tLAST RUN\tLAST SUCCESS\tSTORAGE\n")
			for _, i := range infos {
				fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%d\t%s\t%s\t%s\n", i.Namespace, i.Name, i.Cron, i.Suspended, i.Active, orDash(i.LastRun), orDash(i.LastSuccess), i.Storage)
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "kubeconfig context of the cluster (default: the current context)")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "schedules of every namespace")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for machine-readable output")
	return cmd
}

func orDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func newScheduleDeleteCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule: its CronJob (and Jobs), ConfigMap, RBAC and ServiceAccount; backups stay",
		Args:  oneName("delete"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := schedule.CheckName(args[0]); err != nil {
				return err
			}
			client, err := scheduleClient(global, from)
			if err != nil {
				return err
			}
			ns := scheduleNamespace(global)
			done, err := schedule.Delete(cmd.Context(), client, ns, args[0])
			for _, d := range done {
				fmt.Fprintln(streams.Out, d)
			}
			if err != nil {
				return fmt.Errorf("delete schedule %s in namespace %s: %w", args[0], ns, err)
			}
			_, err = fmt.Fprintf(streams.Out, "Schedule %s is deleted; its backups stay in storage (ferry prune --schedule %s removes them by policy).\n", args[0], args[0])
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "kubeconfig context of the cluster (default: the current context)")
	return cmd
}
