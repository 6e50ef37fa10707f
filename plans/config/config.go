// Package config is ferry.yaml's schema: its types, parsing, validation, merging with a preset,
// and the embedded presets, apart from planning (as Velero keeps its API types apart from its
// controllers). Beyond the schema it only resolves the Secrets its settings refer to and shapes a
// mover pod from its settings. plans, snapshot and migrate read their settings from it; the
// traffic switchers and gates import nothing else of ferry's planning.
package config

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/labels"
)

// Config is ferry.yaml: what flags cannot say well. Presets are Configs too. A plan (and so a
// backup's manifest) records its Planning part; Traffic and Rollout are the blue-green run's
// alone, which keeps them in its journal.
type Config struct {
	Planning `yaml:",inline"`
	// Traffic and Rollout say how ferry migrate shifts traffic to green (see rollout.go).
	Traffic *Traffic `yaml:"traffic,omitempty" json:"traffic,omitempty"`
	Rollout *Rollout `yaml:"rollout,omitempty" json:"rollout,omitempty"`
}

// Planning is what planning reads of ferry.yaml and a plan records: what moves, where its data
// lives, how it is quiesced, mapped and moved.
type Planning struct {
	// Description says what a preset is for.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Preset names an embedded preset whose settings this file extends.
	Preset  string    `yaml:"preset,omitempty" json:"preset,omitempty"`
	Include Selection `yaml:"include,omitempty" json:"include,omitzero"`
	Exclude Selection `yaml:"exclude,omitempty" json:"exclude,omitzero"`
	// Databases and Buckets hold the platform's data outside Kubernetes objects and volumes.
	Databases []Database `yaml:"databases,omitempty" json:"databases,omitempty"`
	Buckets   []Bucket   `yaml:"buckets,omitempty" json:"buckets,omitempty"`
	// Tenants names a cluster-scoped resource whose objects each own a namespace (Kubeflow Profiles).
	Tenants *Tenants `yaml:"tenants,omitempty" json:"tenants,omitempty"`
	// Quiesce lists what must stop writing before a consistent snapshot.
	Quiesce         []QuiesceRule     `yaml:"quiesce,omitempty" json:"quiesce,omitempty"`
	StorageClassMap map[string]string `yaml:"storageClassMap,omitempty" json:"storageClassMap,omitempty"`
	NamespaceMap    map[string]string `yaml:"namespaceMap,omitempty" json:"namespaceMap,omitempty"`
	Throughput      Throughput        `yaml:"throughput,omitempty" json:"throughput,omitzero"`
	// Mover shapes the short-lived pods that read and write claims (see mover.go).
	Mover Mover `yaml:"mover,omitempty" json:"mover,omitzero"`
	// Sensitive marks fields, beyond a Secret's, whose values differences never show.
	Sensitive []Sensitive `yaml:"sensitive,omitempty" json:"sensitive,omitempty"`
	// Platform and State say, for an upgrade, what green's new release installs and what moves
	// (see release.go).
	Platform ReleasePart `yaml:"platform,omitempty" json:"platform,omitzero"`
	State    ReleasePart `yaml:"state,omitempty" json:"state,omitzero"`
}

// Selection picks objects by namespace, resource and label.
type Selection struct {
	Namespaces []string `yaml:"namespaces,omitempty" json:"namespaces,omitempty"`
	// Resources are plural resource names, optionally with their group: "configmaps", "profiles.kubeflow.org".
	Resources     []string `yaml:"resources,omitempty" json:"resources,omitempty"`
	LabelSelector string   `yaml:"labelSelector,omitempty" json:"labelSelector,omitempty"`
	// Objects (include only) are objects that move from a cluster's own namespace (kube-system),
	// whose other contents stay: a platform's parts installed there beside the cluster's own.
	Objects []ObjectNames `yaml:"objects,omitempty" json:"objects,omitempty"`
}

// Database is a database running in a pod of the cluster.
type Database struct {
	Name   string `yaml:"name" json:"name"`
	Engine string `yaml:"engine" json:"engine"` // mysql (MySQL and MariaDB) or postgresql
	// Namespace and Workload ("deployment/mysql", "statefulset/db") find the pod to exec into.
	Namespace string `yaml:"namespace" json:"namespace"`
	Workload  string `yaml:"workload" json:"workload"`
	Container string `yaml:"container,omitempty" json:"container,omitempty"`
	// Secret holds the credentials; without it the pod's environment is used.
	Secret *SecretRef `yaml:"secret,omitempty" json:"secret,omitempty"`
	// Schemas to dump; empty means all but the engine's own.
	Schemas []string `yaml:"schemas,omitempty" json:"schemas,omitempty"`
	// Target is where the cluster a restore writes to keeps the database, when not here.
	Target *DatabaseTarget `yaml:"target,omitempty" json:"target,omitempty"`
}

// SecretRef names a Secret and the keys holding credentials.
type SecretRef struct {
	Name        string `yaml:"name" json:"name"`
	UserKey     string `yaml:"userKey,omitempty" json:"userKey,omitempty"`
	PasswordKey string `yaml:"passwordKey,omitempty" json:"passwordKey,omitempty"`
	AccessKey   string `yaml:"accessKeyKey,omitempty" json:"accessKeyKey,omitempty"`
	SecretKey   string `yaml:"secretKeyKey,omitempty" json:"secretKeyKey,omitempty"`
}

// Bucket is a bucket of an S3-compatible store the platform runs (Kubeflow's MinIO) or uses.
type Bucket struct {
	Name      string     `yaml:"name" json:"name"`
	Namespace string     `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Workload  string     `yaml:"workload,omitempty" json:"workload,omitempty"` // reached by port-forward
	Port      int        `yaml:"port,omitempty" json:"port,omitempty"`
	Endpoint  string     `yaml:"endpoint,omitempty" json:"endpoint,omitempty"` // or directly
	Secret    *SecretRef `yaml:"secret,omitempty" json:"secret,omitempty"`
	// Target is where the cluster a restore writes to keeps the bucket, when not here.
	Target *BucketTarget `yaml:"target,omitempty" json:"target,omitempty"`
	// Versions says which versions of a versioned bucket's objects a backup is meant to hold. A
	// backup copies each object's current version; by default the earlier versions and delete
	// markers of a bucket that keeps them are listed as skipped (exit 3). VersionsCurrent accepts
	// the current versions alone: the backup only logs what it leaves out.
	Versions string `yaml:"versions,omitempty" json:"versions,omitempty"`
}

// VersionsCurrent is Bucket.Versions for a backup of each object's current version alone.
const VersionsCurrent = "current"

// Tenants describes per-tenant namespaces made from a cluster-scoped resource.
type Tenants struct {
	Resource string `yaml:"resource" json:"resource"` // e.g. profiles.kubeflow.org; each object's name is its namespace
}

// QuiesceRule stops writers: scale workloads to zero, suspend CronJobs, or annotate/patch custom
// resources as their controllers expect.
type QuiesceRule struct {
	Resource      string            `yaml:"resource" json:"resource"`
	Namespace     string            `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Names         []string          `yaml:"names,omitempty" json:"names,omitempty"`
	LabelSelector string            `yaml:"labelSelector,omitempty" json:"labelSelector,omitempty"`
	Action        string            `yaml:"action" json:"action"` // scale-to-zero, suspend, annotate, patch
	Annotations   map[string]string `yaml:"annotations,omitempty" json:"annotations,omitempty"`
	Patch         string            `yaml:"patch,omitempty" json:"patch,omitempty"` // JSON merge patch
	// WaitForPods has an annotate or patch rule wait, as scale-to-zero and suspend always do, until
	// no pod the object owns (through owner references) runs: for a controller that ends the
	// object's pods when it sees the change (a Kubeflow Notebook's).
	WaitForPods bool   `yaml:"waitForPods,omitempty" json:"waitForPods,omitempty"`
	Why         string `yaml:"why,omitempty" json:"why,omitempty"`
}

// Throughput is what estimates assume; zero fields take the defaults.
type Throughput struct {
	ObjectsPerSecond  float64 `yaml:"objectsPerSecond,omitempty" json:"objectsPerSecond,omitempty"`
	VolumeMiBPerSec   float64 `yaml:"volumeMiBPerSecond,omitempty" json:"volumeMiBPerSecond,omitempty"`
	DatabaseMiBPerSec float64 `yaml:"databaseMiBPerSecond,omitempty" json:"databaseMiBPerSecond,omitempty"`
	BucketMiBPerSec   float64 `yaml:"bucketMiBPerSecond,omitempty" json:"bucketMiBPerSecond,omitempty"`
}

//go:embed presets/*.yaml
var presetFiles embed.FS

// Presets lists the embedded presets' names.
func Presets() []string {
	entries, _ := presetFiles.ReadDir("presets")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return names
}

// PresetName names the preset asked for in errors (a command line names its flag instead).
const PresetName = "preset"

// LoadPreset returns an embedded preset.
func LoadPreset(name string) (Config, error) {
	data, err := presetFiles.ReadFile("presets/" + name + ".yaml")
	if err != nil {
		return Config{}, badinput.Value(PresetName, strconv.Quote(name), "unknown preset (known: %s)", strings.Join(Presets(), ", "))
	}
	return ParseConfig("preset "+name, data)
}

// LoadConfig reads ferry.yaml from path and merges the preset it names (or preset, from the flag).
func LoadConfig(path, preset string) (Config, error) {
	var cfg Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, badinput.Errorf("config file: %w", err)
		}
		if cfg, err = ParseConfig(path, data); err != nil {
			return Config{}, err
		}
	}
	if preset == "" {
		preset = cfg.Preset
	} else if cfg.Preset != "" && cfg.Preset != preset {
		return Config{}, badinput.Value(PresetName, strconv.Quote(preset), "conflicts with %s's preset %q", path, cfg.Preset)
	}
	if preset == "" {
		return cfg, nil
	}
	base, err := LoadPreset(preset)
	if err != nil {
		return Config{}, err
	}
	merged := base.Merge(cfg)
	merged.Preset = preset
	// Each file was checked alone; some rules hold only for the two together (a namespace both
	// the preset's platform and the file's state).
	if err := merged.Validate(); err != nil {
		return Config{}, badinput.Errorf("%s with preset %s: %w", cmp.Or(path, "flags"), preset, err)
	}
	return merged, nil
}

// ParseConfig parses and checks a ferry.yaml document; errors name the file and the line or field.
func ParseConfig(name string, data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: "), "\n ", "")
		return Config{}, badinput.Errorf("%s: %s", name, yamlValue.ReplaceAllString(msg, "$1 (value not shown)"))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, badinput.Errorf("%s: holds more than one YAML document", name)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, badinput.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// yamlValue is what yaml's type errors quote of the file ("cannot unmarshal !!str `Bearer ...`":
// up to 10 characters): a secret value written where a mapping belongs would show.
var yamlValue = regexp.MustCompile("(!![a-z]+) `[^`]*`")

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// maxItemName bounds a database's or bucket's name, which names the backup's streams of it
// (databases/<name>.rows.zst.age): a file name, or a MinIO key's segment, holds 255 bytes.
const maxItemName = 180

// Validate checks the fields' values; the error names the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	c.Planning.validate(bad)
	if c.Traffic != nil {
		c.Traffic.validate(bad)
	}
	if c.Rollout != nil {
		c.Rollout.validate(bad)
	}
	return errors.Join(errs...)
}

// Validate checks the fields' values; the error names the field.
func (c Planning) Validate() error {
	var errs []error
	c.validate(func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	})
	return errors.Join(errs...)
}

func (c Planning) validate(bad func(field, format string, args ...any)) {
	for i, sf := range c.Sensitive {
		sf.validate(fmt.Sprintf("sensitive[%d]", i), bad)
	}
	checkSelection := func(field string, s Selection) {
		if _, err := labels.Parse(s.LabelSelector); err != nil {
			bad(field+".labelSelector", "%v", err)
		}
		for i, ns := range s.Namespaces {
			if ns != "*" && !dnsLabel.MatchString(ns) {
				bad(fmt.Sprintf("%s.namespaces[%d]", field, i), "%q is not a namespace name", ns)
			}
		}
		for i, r := range s.Resources {
			if r == "" || strings.ContainsAny(r, " /") {
				bad(fmt.Sprintf("%s.resources[%d]", field, i), "%q is not a resource such as configmaps or profiles.kubeflow.org", r)
			}
		}
	}
	checkSelection("include", c.Include)
	checkSelection("exclude", c.Exclude)
	for i, o := range c.Include.Objects {
		f := fmt.Sprintf("include.objects[%d]", i)
		if o.Resource == "" || strings.ContainsAny(o.Resource, " /") {
			bad(f+".resource", "%q is not a resource such as configmaps or daemonsets.apps", o.Resource)
		}
		if len(o.Names) == 0 {
			bad(f+".names", "missing")
		}
	}
	if len(c.Exclude.Objects) > 0 {
		bad("exclude.objects", "not supported: objects are named to move from a cluster's own namespace (include.objects)")
	}
	if c.Exclude.LabelSelector != "" {
		bad("exclude.labelSelector", "not supported: negate it in include.labelSelector (e.g. app!=cache)")
	}
	seen := map[string]bool{}
	for i, d := range c.Databases {
		f := fmt.Sprintf("databases[%d]", i)
		switch {
		case d.Name == "":
			bad(f+".name", "missing")
		case seen["db/"+d.Name]:
			bad(f+".name", "%q used twice", d.Name)
		case len(d.Name) > maxItemName:
			bad(f+".name", "%.40q...: %d bytes, at most %d (it names the backup's files of the database)", d.Name, len(d.Name), maxItemName)
		}
		seen["db/"+d.Name] = true
		if d.Engine != "mysql" && d.Engine != "postgresql" {
			bad(f+".engine", "%q: want mysql or postgresql", d.Engine)
		}
		if !dnsLabel.MatchString(d.Namespace) {
			bad(f+".namespace", "%q is not a namespace name", d.Namespace)
		}
		if _, _, err := ParseWorkload(d.Workload); err != nil {
			bad(f+".workload", "%v", err)
		}
		if d.Secret != nil && d.Secret.Name == "" {
			bad(f+".secret.name", "missing")
		}
		if d.Target != nil {
			validateDatabaseTarget(targetField("databases", i), d.Target, bad)
		}
	}
	for i, b := range c.Buckets {
		f := fmt.Sprintf("buckets[%d]", i)
		switch {
		case b.Name == "":
			bad(f+".name", "missing")
		case len(b.Name) > maxItemName:
			bad(f+".name", "%.40q...: %d bytes, at most %d (it names the backup's files of the bucket)", b.Name, len(b.Name), maxItemName)
		}
		switch {
		case b.Endpoint == "" && b.Workload == "":
			bad(f, "needs a workload (reached by port-forward) or an endpoint")
		case b.Workload != "":
			if _, _, err := ParseWorkload(b.Workload); err != nil {
				bad(f+".workload", "%v", err)
			}
			if !dnsLabel.MatchString(b.Namespace) {
				bad(f+".namespace", "%q is not a namespace name", b.Namespace)
			}
			if b.Port <= 0 || b.Port > 65535 {
				bad(f+".port", "%d: want a port from 1 to 65535", b.Port)
			}
		}
		if b.Versions != "" && b.Versions != VersionsCurrent {
			bad(f+".versions", "%q: want %s (back up each object's current version alone), or leave it out", b.Versions, VersionsCurrent)
		}
		if b.Target != nil {
			validateBucketTarget(targetField("buckets", i), b.Target, b, bad)
		}
	}
	if c.Tenants != nil && c.Tenants.Resource == "" {
		bad("tenants.resource", "missing")
	}
	for i, q := range c.Quiesce {
		f := fmt.Sprintf("quiesce[%d]", i)
		if q.Resource == "" {
			bad(f+".resource", "missing")
		}
		if _, err := labels.Parse(q.LabelSelector); err != nil {
			bad(f+".labelSelector", "%v", err)
		}
		switch q.Action {
		case "scale-to-zero", "suspend":
		case "annotate":
			if len(q.Annotations) == 0 {
				bad(f+".annotations", "action annotate needs annotations")
			}
		case "patch":
			if q.Patch == "" {
				bad(f+".patch", "action patch needs a JSON merge patch")
			}
		default:
			bad(f+".action", "%q: want scale-to-zero, suspend, annotate or patch", q.Action)
		}
	}
	if err := CheckStorageClassMap(c.StorageClassMap); err != nil {
		bad("storageClassMap", "%s", reason(err))
	}
	if err := CheckNamespaceMap(c.NamespaceMap); err != nil {
		bad("namespaceMap", "%s", reason(err))
	}
	for field, v := range map[string]float64{
		"throughput.objectsPerSecond": c.Throughput.ObjectsPerSecond, "throughput.volumeMiBPerSecond": c.Throughput.VolumeMiBPerSec,
		"throughput.databaseMiBPerSecond": c.Throughput.DatabaseMiBPerSec, "throughput.bucketMiBPerSecond": c.Throughput.BucketMiBPerSec,
	} {
		if v < 0 {
			bad(field, "%v: must not be negative", v)
		}
	}
	c.Mover.validate(bad)
	c.validateRelease(bad)
}

// ParseWorkload splits "deployment/mysql" into kind and name.
func ParseWorkload(s string) (kind, name string, err error) {
	kind, name, ok := strings.Cut(s, "/")
	kind = strings.ToLower(kind)
	if !ok || name == "" || (kind != "deployment" && kind != "statefulset") {
		return "", "", fmt.Errorf("%q: want deployment/NAME or statefulset/NAME", s)
	}
	return kind, name, nil
}

// Merge returns c extended by over: lists are joined (an entry of over replaces c's entry of the
// same name), maps merged, and set scalars of over win.
func (c Config) Merge(over Config) Config {
	out := Config{Planning: c.Planning.Merge(over.Planning), Traffic: c.Traffic, Rollout: c.Rollout}
	if over.Traffic != nil {
		out.Traffic = over.Traffic
	}
	if over.Rollout != nil {
		out.Rollout = over.Rollout
	}
	return out
}

// Merge returns c extended by over, as Config.Merge does.
func (c Planning) Merge(over Planning) Planning {
	out := c
	if over.Description != "" {
		out.Description = over.Description
	}
	out.Include = mergeSelection(c.Include, over.Include)
	out.Exclude = mergeSelection(c.Exclude, over.Exclude)
	out.Databases = mergeNamed(c.Databases, over.Databases, func(d Database) string { return d.Name })
	out.Buckets = mergeNamed(c.Buckets, over.Buckets, func(b Bucket) string { return b.Name })
	if over.Tenants != nil {
		out.Tenants = over.Tenants
	}
	out.Quiesce = append(append([]QuiesceRule(nil), c.Quiesce...), over.Quiesce...)
	out.Sensitive = append(append([]Sensitive(nil), c.Sensitive...), over.Sensitive...)
	out.StorageClassMap = mergeMaps(c.StorageClassMap, over.StorageClassMap)
	out.NamespaceMap = mergeMaps(c.NamespaceMap, over.NamespaceMap)
	out.Mover = c.Mover.merge(over.Mover)
	out.Platform = c.Platform.merge(over.Platform)
	out.State = c.State.merge(over.State)
	t := &out.Throughput
	for _, p := range []struct {
		dst *float64
		v   float64
	}{
		{&t.ObjectsPerSecond, over.Throughput.ObjectsPerSecond}, {&t.VolumeMiBPerSec, over.Throughput.VolumeMiBPerSec},
		{&t.DatabaseMiBPerSec, over.Throughput.DatabaseMiBPerSec}, {&t.BucketMiBPerSec, over.Throughput.BucketMiBPerSec},
	} {
		if p.v != 0 {
			*p.dst = p.v
		}
	}
	return out
}

func mergeSelection(a, b Selection) Selection {
	out := Selection{
		Namespaces:    append(append([]string(nil), a.Namespaces...), b.Namespaces...),
		Resources:     append(append([]string(nil), a.Resources...), b.Resources...),
		LabelSelector: a.LabelSelector,
		Objects:       append(append([]ObjectNames(nil), a.Objects...), b.Objects...),
	}
	if b.LabelSelector != "" {
		out.LabelSelector = b.LabelSelector
	}
	return out
}

func mergeNamed[T any](a, b []T, name func(T) string) []T {
	out := append([]T(nil), a...)
	for _, item := range b {
		replaced := false
		for i := range out {
			if name(out[i]) == name(item) {
				out[i], replaced = item, true
			}
		}
		if !replaced {
			out = append(out, item)
		}
	}
	return out
}

func mergeMaps(a, b map[string]string) map[string]string {
	if len(a)+len(b) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// DatabaseNamed is the configured database of that name, if any.
func (c Planning) DatabaseNamed(name string) (Database, bool) {
	for _, d := range c.Databases {
		if d.Name == name {
			return d, true
		}
	}
	return Database{}, false
}

// BucketNamed is the configured bucket of that name, if any.
func (c Planning) BucketNamed(name string) (Bucket, bool) {
	for _, b := range c.Buckets {
		if b.Name == name {
			return b, true
		}
	}
	return Bucket{}, false
}
