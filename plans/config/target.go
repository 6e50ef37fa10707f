package config

import (
	"cmp"
	"fmt"
	"slices"
)

// DatabaseTarget says where a database is kept on the cluster a restore writes to, when not
// where it is on the source: green's new release runs the server in another workload (an
// operator's StatefulSet in place of the release's Deployment), namespace or Secret. A field left
// out is the source's; the container only while the workload is the source's too.
type DatabaseTarget struct {
	Namespace string     `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Workload  string     `yaml:"workload,omitempty" json:"workload,omitempty"`
	Container string     `yaml:"container,omitempty" json:"container,omitempty"`
	Secret    *SecretRef `yaml:"secret,omitempty" json:"secret,omitempty"`
	// WithoutSecret: the target's credentials are its pod's environment, not the source's Secret.
	WithoutSecret bool `yaml:"withoutSecret,omitempty" json:"withoutSecret,omitempty"`
}

// BucketTarget says where a bucket is kept on the cluster a restore writes to, when not where it
// is on the source: green's new release keeps its objects in another store (Kubeflow's SeaweedFS
// in place of MinIO). A field left out is the source's; the port only while the workload is.
type BucketTarget struct {
	Namespace string     `yaml:"namespace,omitempty" json:"namespace,omitempty"`
	Workload  string     `yaml:"workload,omitempty" json:"workload,omitempty"`
	Port      int        `yaml:"port,omitempty" json:"port,omitempty"`
	Endpoint  string     `yaml:"endpoint,omitempty" json:"endpoint,omitempty"`
	Secret    *SecretRef `yaml:"secret,omitempty" json:"secret,omitempty"`
	// WithoutSecret: the target's store is reached anonymously, not with the source's Secret.
	WithoutSecret bool `yaml:"withoutSecret,omitempty" json:"withoutSecret,omitempty"`
}

// OnTarget is the database as a restore reaches it on its target: the target's location over the
// source's, whose namespace mapNamespace maps (the source's namespace as the target names it);
// a namespace the target section names is the target's own and is not mapped.
func (d Database) OnTarget(mapNamespace func(string) string) Database {
	t := d.Target
	d.Target = nil
	if t == nil {
		d.Namespace = mapNamespace(d.Namespace)
		return d
	}
	d.Namespace = cmp.Or(t.Namespace, mapNamespace(d.Namespace))
	if t.Workload != "" {
		d.Workload, d.Container = t.Workload, t.Container
	} else if t.Container != "" {
		d.Container = t.Container
	}
	if t.Secret != nil || t.WithoutSecret {
		d.Secret = t.Secret
	}
	return d
}

// Reversed is the database for a copy the other way (a carry-back from green to blue): its
// location is the target's, and its target the source's, which no namespace mapping changes.
func (d Database) Reversed(mapNamespace func(string) string) Database {
	if d.Target == nil {
		d.Namespace = mapNamespace(d.Namespace)
		return d
	}
	back := &DatabaseTarget{Namespace: d.Namespace, Workload: d.Workload, Container: d.Container, Secret: d.Secret, WithoutSecret: d.Secret == nil}
	d = d.OnTarget(mapNamespace)
	d.Target = back
	return d
}

// OnTarget is the bucket as a restore reaches it on its target (see Database.OnTarget).
func (b Bucket) OnTarget(mapNamespace func(string) string) Bucket {
	t := b.Target
	b.Target = nil
	if b.Namespace != "" {
		b.Namespace = mapNamespace(b.Namespace)
	}
	if t == nil {
		return b
	}
	b.Namespace = cmp.Or(t.Namespace, b.Namespace)
	switch {
	case t.Endpoint != "":
		b.Endpoint, b.Workload, b.Port = t.Endpoint, "", 0
	case t.Workload != "":
		b.Endpoint, b.Workload, b.Port = "", t.Workload, t.Port
	case t.Port != 0:
		b.Port = t.Port
	}
	if t.Secret != nil || t.WithoutSecret {
		b.Secret = t.Secret
	}
	return b
}

// Reversed is the bucket for a copy the other way (see Database.Reversed).
func (b Bucket) Reversed(mapNamespace func(string) string) Bucket {
	if b.Target == nil {
		return b.OnTarget(mapNamespace)
	}
	back := &BucketTarget{Namespace: b.Namespace, Workload: b.Workload, Port: b.Port, Endpoint: b.Endpoint, Secret: b.Secret, WithoutSecret: b.Secret == nil}
	b = b.OnTarget(mapNamespace)
	b.Target = back
	return b
}

// TargetOf says where the target keeps the database or bucket (kind) of that name, when its
// target section says: an endpoint, or namespace/workload with the namespace as ferry.yaml's
// namespaceMap maps it.
func (c Planning) TargetOf(kind, name string) string {
	if kind == "database" {
		if d, ok := c.DatabaseNamed(name); ok && d.Target != nil {
			d = d.OnTarget(c.MapNamespace)
			return d.Namespace + "/" + d.Workload
		}
		return ""
	}
	if b, ok := c.BucketNamed(name); ok && b.Target != nil {
		b = b.OnTarget(c.MapNamespace)
		return cmp.Or(b.Endpoint, fmt.Sprintf("%s/%s:%d", b.Namespace, b.Workload, b.Port))
	}
	return ""
}

// WithTargetsOf is c (a backup's configuration) with the target sections of the databases and
// buckets other names: for restoring a backup made before the target kept them elsewhere. One
// named there without a section is restored where the source kept it; one c lacks is an error.
func (c Planning) WithTargetsOf(other Planning) (Planning, error) {
	c.Databases, c.Buckets = slices.Clone(c.Databases), slices.Clone(c.Buckets)
	for i, d := range other.Databases {
		j := slices.IndexFunc(c.Databases, func(b Database) bool { return b.Name == d.Name })
		if j < 0 {
			return c, fmt.Errorf("databases[%d]: the backup holds no database %q", i, d.Name)
		}
		c.Databases[j].Target = d.Target
	}
	for i, b := range other.Buckets {
		j := slices.IndexFunc(c.Buckets, func(a Bucket) bool { return a.Name == b.Name })
		if j < 0 {
			return c, fmt.Errorf("buckets[%d]: the backup holds no bucket %q", i, b.Name)
		}
		c.Buckets[j].Target = b.Target
	}
	return c, nil
}

// MapNamespace is a source namespace as namespaceMap names it on the target.
func (c Planning) MapNamespace(ns string) string {
	if to, ok := c.NamespaceMap[ns]; ok {
		return to
	}
	return ns
}

// validateDatabaseTarget checks a database's target section (field names it in errors).
func validateDatabaseTarget(field string, t *DatabaseTarget, bad func(field, format string, args ...any)) {
	if *t == (DatabaseTarget{}) {
		bad(field, "empty: name the namespace, workload, container or secret the target keeps the database in, or leave target out")
		return
	}
	if t.Namespace != "" && !dnsLabel.MatchString(t.Namespace) {
		bad(field+".namespace", "%q is not a namespace name", t.Namespace)
	}
	if t.Workload != "" {
		if _, _, err := ParseWorkload(t.Workload); err != nil {
			bad(field+".workload", "%v", err)
		}
	}
	checkTargetSecret(field, t.Secret, t.WithoutSecret, bad)
}

// checkTargetSecret checks a target's secret and withoutSecret.
func checkTargetSecret(field string, secret *SecretRef, without bool, bad func(field, format string, args ...any)) {
	switch {
	case secret != nil && without:
		bad(field, "names a secret and withoutSecret: want one of them")
	case secret != nil && secret.Name == "":
		bad(field+".secret.name", "missing")
	}
}

// validateBucketTarget checks a bucket's target section; source is the bucket's own location,
// which fields the target leaves out come from.
func validateBucketTarget(field string, t *BucketTarget, source Bucket, bad func(field, format string, args ...any)) {
	if *t == (BucketTarget{}) {
		bad(field, "empty: name the namespace, workload and port, endpoint or secret the target keeps the bucket in, or leave target out")
		return
	}
	if t.Endpoint != "" && (t.Workload != "" || t.Port != 0) {
		bad(field, "names both an endpoint and a workload: the store is reached one way")
	}
	if t.Namespace != "" && !dnsLabel.MatchString(t.Namespace) {
		bad(field+".namespace", "%q is not a namespace name", t.Namespace)
	}
	if t.Workload != "" {
		if _, _, err := ParseWorkload(t.Workload); err != nil {
			bad(field+".workload", "%v", err)
		}
		if t.Port <= 0 || t.Port > 65535 {
			bad(field+".port", "%d: want the port of the target's workload, from 1 to 65535", t.Port)
		}
		if t.Namespace == "" && source.Namespace == "" {
			bad(field+".namespace", "missing: the workload's namespace")
		}
	} else if t.Port != 0 && (source.Workload == "" || t.Port < 0 || t.Port > 65535) {
		bad(field+".port", "%d: a port goes with a workload, from 1 to 65535", t.Port)
	}
	checkTargetSecret(field, t.Secret, t.WithoutSecret, bad)
}

// targetField names a data item's target section in errors.
func targetField(kind string, i int) string { return fmt.Sprintf("%s[%d].target", kind, i) }
