package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/migrate"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/ferrykube/ferry/storage"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// options is every command, in kubectl's pattern: the flags fill an options struct; complete
// reads what they name (files, presets, keys) without reaching storage or a cluster; validate
// checks the values and touches nothing; run does the work.
type options interface {
	complete(args []string) error
	validate() error
	run(ctx context.Context) error
}

// runE runs o's three steps, in order, as a command's RunE.
func runE(o options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.complete(args); err != nil {
			return err
		}
		if err := o.validate(); err != nil {
			return err
		}
		return o.run(cmd.Context())
	}
}

// flagNames are the flags that give the values the libraries name in their errors.
var flagNames = map[string]string{
	config.NamespaceMapName: "--namespace-map", config.StorageClassMapName: "--storage-class-map",
	config.PresetName: "--preset", plans.LeaveBehindName: "--leave-behind",
	snapshot.IdentityFileName: "--identity", snapshot.RecipientName: "--encrypt-to",
	migrate.WarmName: "--warm", migrate.WarmRoundsName: "--warm-rounds", migrate.WarmDeltaName: "--warm-delta",
	snapshot.VolumeFormatName: "--volume-format",
	"grace":                   "--grace", "upgrade": "--upgrade",
	"keep-last": "--keep-last", "keep-hourly": "--keep-hourly", "keep-daily": "--keep-daily",
	"keep-weekly": "--keep-weekly", "keep-monthly": "--keep-monthly", "keep-yearly": "--keep-yearly",
}

// flagged names the flag instead of the library's value in err, for values a flag gave.
func flagged(err error) error { return badinput.Flag(err, flagNames) }

// selectionFlags say what moves: plan, backup and restore and verify alike.
type selectionFlags struct{ include, exclude config.Selection }

func (s *selectionFlags) addFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&s.include.Namespaces, "include-namespaces", nil, "only these (source) namespaces (default all)")
	f.StringSliceVar(&s.exclude.Namespaces, "exclude-namespaces", nil, "not these (source) namespaces")
	f.StringSliceVar(&s.include.Resources, "include-resources", nil, "only these resource types, e.g. configmaps,profiles.kubeflow.org (default all)")
	f.StringSliceVar(&s.exclude.Resources, "exclude-resources", nil, "not these resource types")
	f.StringVarP(&s.include.LabelSelector, "selector", "l", "", "only objects with these labels (CRDs and namespaces always move)")
}

// config is the selection as configuration, to merge over ferry.yaml's.
func (s *selectionFlags) config() config.Config {
	return config.Config{Planning: config.Planning{Include: s.include, Exclude: s.exclude}}
}

func (s *selectionFlags) isSet() bool {
	return len(s.include.Namespaces)+len(s.include.Resources)+len(s.exclude.Namespaces)+len(s.exclude.Resources) > 0 || s.include.LabelSelector != ""
}

// dataFilter narrows a plan's databases and buckets to the namespaces the flags select
// (plans.Options.Data), as a restore by the same flags does; nil when no flag selects.
func (s *selectionFlags) dataFilter() (*plans.Filter, error) {
	if !s.isSet() {
		return nil, nil
	}
	f, err := plans.NewBackupFilter(s.config().Planning)
	return f, badinput.Wrap(err)
}

// validate checks the selection as ferry.yaml's include and exclude are checked.
func (s *selectionFlags) validate() error {
	if err := s.config().Validate(); err != nil {
		return badinput.Errorf("flags: %w", err)
	}
	return nil
}

// mappingFlags rename namespaces and storage classes on the target.
type mappingFlags struct{ namespaces, classes []string }

func (m *mappingFlags) addFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&m.namespaces, "namespace-map", nil, "put namespace FROM as TO on the target (FROM=TO, repeatable); adds to ferry.yaml's namespaceMap")
	f.StringSliceVar(&m.classes, "storage-class-map", nil, "give claims of storage class FROM the class TO on the target (FROM=TO, repeatable); adds to ferry.yaml's storageClassMap")
}

// mapping parses and checks the flags' maps by the rules of ferry.yaml's.
func (m *mappingFlags) mapping() (snapshot.Mapping, error) {
	var out snapshot.Mapping
	var err error
	if out.Namespaces, err = config.ParseMap(config.NamespaceMapName, m.namespaces); err != nil {
		return out, flagged(err)
	}
	if out.StorageClasses, err = config.ParseMap(config.StorageClassMapName, m.classes); err != nil {
		return out, flagged(err)
	}
	return out, checkMapping(out)
}

// checkMapping checks a whole mapping: the flags', or ferry.yaml's with the flags' over it.
func checkMapping(m snapshot.Mapping) error {
	if err := config.CheckNamespaceMap(m.Namespaces); err != nil {
		return flagged(err)
	}
	return flagged(config.CheckStorageClassMap(m.StorageClasses))
}

// moverFlags choose the mover pods that read and write claims.
type moverFlags struct {
	image  string
	direct bool
}

// addFlags adds --mover-image and, with a help text, --mover-direct.
func (m *moverFlags) addFlags(f *pflag.FlagSet, directHelp string) {
	f.StringVar(&m.image, "mover-image", "ghcr.io/ferrykube/ferry:"+buildinfo.Read().Version, "image of the mover pods that read and write volumes (the ferry image)")
	if directHelp != "" {
		f.BoolVar(&m.direct, "mover-direct", false, directHelp)
	}
}

// presigner is the storage's direct access for mover pods, when --mover-direct asks for it: any
// storage that presigns URLs, through the optional storage.Presigner.
func (m *moverFlags) presigner(store storage.Backend) (storage.Presigner, error) {
	if !m.direct {
		return nil, nil
	}
	p, ok := store.(storage.Presigner)
	if !ok {
		return nil, badinput.Errorf("--mover-direct needs S3 storage that mover pods can reach, not %s", store)
	}
	return p, nil
}

// parallelFlag is how much a command does at once.
type parallelFlag struct{ n int }

func (p *parallelFlag) addFlags(f *pflag.FlagSet, def int, help string) {
	f.IntVar(&p.n, "parallel", def, help)
}

func (p *parallelFlag) validate() error {
	if p.n < 1 {
		return badinput.Errorf("--parallel %d: want 1 or more", p.n)
	}
	return nil
}

// outputFlags are -o: the formats a command prints besides its text for people, and for plan a
// file to write. Every command checks and prints them here.
type outputFlags struct {
	format  string
	formats []string // json, yaml, in the order the help gives them
	files   bool     // a file name ending in .yaml, .yml or .json
}

func newOutputFlags(formats ...string) *outputFlags { return &outputFlags{formats: formats} }

func (o *outputFlags) addFlags(f *pflag.FlagSet, help string) {
	f.StringVarP(&o.format, "output", "o", "", help)
}

func (o *outputFlags) validate() error {
	if o.format == "" || slices.Contains(o.formats, o.format) || o.isFile() {
		return nil
	}
	want := strings.Join(o.formats, " or ")
	if o.files {
		want = strings.Join(o.formats, ", ") + " or a file name ending in .yaml, .yml or .json"
	}
	return badinput.Errorf("--output %q: want %s", o.format, want)
}

// isFile reports whether -o names a file to write.
func (o *outputFlags) isFile() bool {
	return o.files && (strings.HasSuffix(o.format, ".yaml") || strings.HasSuffix(o.format, ".yml") || strings.HasSuffix(o.format, ".json"))
}

// structured reports whether -o asks for JSON or YAML on stdout.
func (o *outputFlags) structured() bool { return o.format == "json" || o.format == "yaml" }

// print writes v as JSON or YAML for -o json|yaml and reports true; for the text for people it
// writes nothing and reports false.
func (o *outputFlags) print(out io.Writer, v any) (bool, error) {
	switch o.format {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return true, err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = out.Write(data)
		return true, err
	}
	return false, nil
}

// noArgs rejects positional arguments as bad input.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return badinput.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}

// oneArg accepts one positional argument; what names it, and see where to find one.
func oneArg(command, what, see string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 1 {
			return nil
		}
		if see != "" {
			see = " (see " + see + ")"
		}
		return badinput.Errorf("ferry %s takes one %s, got %d arguments%s", command, what, len(args), see)
	}
}

// warmFlags are ferry migrate's --warm, --warm-rounds and --warm-delta.
type warmFlags struct {
	on     bool
	rounds int
	delta  string
}

func (w *warmFlags) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&w.on, "warm", false, "copy the volumes to green while blue is live, in rounds, then quiesce blue and copy the last delta: writes stop only for that delta, the databases, buckets, objects, verify and shift")
	f.IntVar(&w.rounds, "warm-rounds", migrate.DefaultWarmRounds, "with --warm, the most pre-copy rounds before blue is quiesced")
	f.StringVar(&w.delta, "warm-delta", "64Mi", "with --warm, the rounds end after one that uploaded at most this much (a size: 64Mi, 1Gi, 500M, 0)")
}

// isSet says whether any of the flags was given.
func (w *warmFlags) isSet(f *pflag.FlagSet) bool {
	return w.on || f.Changed("warm-rounds") || f.Changed("warm-delta")
}

// warm checks the flags and returns the run's warm settings; nil without --warm.
func (w *warmFlags) warm(f *pflag.FlagSet) (*migrate.Warm, error) {
	if !w.on {
		for _, name := range []string{"warm-rounds", "warm-delta"} {
			if f.Changed(name) {
				return nil, badinput.Errorf("--%s needs --warm", name)
			}
		}
		return nil, nil
	}
	q, err := resource.ParseQuantity(w.delta)
	if err != nil || q.Sign() < 0 {
		return nil, badinput.Errorf("--warm-delta %q: want a size of 0 or more, such as 64Mi or 1Gi", w.delta)
	}
	return &migrate.Warm{Rounds: w.rounds, DeltaBytes: q.Value()}, nil
}
