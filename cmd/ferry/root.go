package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	kube       *genericclioptions.ConfigFlags
	storageURL string
	logFormat  string
	progress   string
	profile    profileOptions

	// Set by complete.
	logger       *slog.Logger
	showProgress bool
}

func newGlobalOptions() *globalOptions {
	return &globalOptions{
		kube:       genericclioptions.NewConfigFlags(true),
		storageURL: storage.DefaultURL,
		logFormat:  "text",
		progress:   "auto",
	}
}

func (o *globalOptions) addFlags(cmd *cobra.Command) {
	flags := cmd.PersistentFlags()
	o.kube.AddFlags(flags)
	flags.StringVar(&o.storageURL, "storage", o.storageURL, "where backups live: file://PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R&path-style=true")
	flags.StringVar(&o.logFormat, "log-format", o.logFormat, "log format: text or json")
	flags.StringVar(&o.progress, "progress", o.progress, "progress bars: auto (when stderr is a terminal), always or never")
	o.profile.addFlags(flags)
}

// complete checks the shared flags and builds the logger.
func (o *globalOptions) complete(errOut io.Writer) error {
	var handler slog.Handler
	switch o.logFormat {
	case "text":
		handler = slog.NewTextHandler(errOut, nil)
	case "json":
		handler = slog.NewJSONHandler(errOut, nil)
	default:
		return badinput.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	switch o.progress {
	case "auto":
		f, ok := errOut.(*os.File)
		o.showProgress = ok && term.IsTerminal(int(f.Fd()))
	case "always":
		o.showProgress = true
	case "never":
		o.showProgress = false
	default:
		return badinput.Errorf("--progress %q: want auto, always or never", o.progress)
	}
	o.logger = slog.New(handler)
	// client-go logs through klog (a stream it gave up on, say); in ferry's log it keeps its format.
	klog.SetSlogLogger(o.logger)
	return o.profile.start()
}

func newRootCommand(global *globalOptions, streams genericiooptions.IOStreams) *cobra.Command {
	streams.Out, streams.ErrOut = discardIfNil(streams.Out), discardIfNil(streams.ErrOut)
	cmd := &cobra.Command{
		Use:   "ferry",
		Short: "Blue-green migration, backup and restore of Kubernetes platforms",
		Long: `ferry inventories a cluster, snapshots its objects, volumes, databases and buckets to storage,
restores them onto another cluster, verifies that nothing was lost, and shifts traffic step by step
while the old cluster stays intact as the way back.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Unknown subcommands reach RunE as arguments, so they get exit code 2 like other bad input.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return badinput.Errorf("unknown command %q; see ferry --help", args[0])
			}
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return global.complete(streams.ErrOut)
		},
	}
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return badinput.Wrap(err) })
	global.addFlags(cmd)
	cmd.AddCommand(newVersionCommand(streams), newPlanCommand(global, streams), newBackupCommand(global, streams), newBackupsCommand(global, streams),
		newRestoreCommand(global, streams), newVerifyCommand(global, streams),
		newMigrateCommand(global, streams), newFlipCommand(global, streams), newRollbackCommand(global, streams), newMoverCommand(streams))
	cmd.AddCommand(newScheduleCommand(global, streams), newPruneCommand(global, streams), newCheckCommand(global, streams))
	return cmd
}
