// Package rules holds what ferry does with each kind of object beyond what it does with every
// object, one file per kind (as Velero's restore item actions): whether and when it moves, what of
// it the source cluster set by itself, how a mapping changes it, when a restore leaves it out, how
// an existing copy is brought in line, and when it is healthy. The machinery that plans, captures,
// restores and verifies looks the rules up by group-resource ("jobs.batch"), the key every caller
// already has and Velero's actions are keyed by.
package rules

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Rule is what ferry does with the objects of one type beyond what it does with every object.
// Every field but Wave is optional; funcs edit the object they are given in place.
type Rule struct {
	// Wave is the restore wave of the type (WaveCRDs … WaveWebhooks).
	Wave int
	// KeepsWave keeps the type in its wave when its objects' owners come later (plans.Order):
	// they are made without those owner references, linked once the owners are made.
	KeepsWave bool
	// History marks rollout history, restored before the controllers that own it (plans.Order).
	History bool
	// After are the types whose objects this type's objects name and need to exist first (a
	// service account token Secret its ServiceAccount); restored earlier in the same wave.
	After []string
	// Never says why no object of the type ever moves.
	Never string
	// Exclude says why one object does not move, or "" (planning and capture).
	Exclude func(obj map[string]any) string
	// Counted lists the objects Exclude leaves out by namespace and reason with their number,
	// not one by one (there are as many as the cluster has Services).
	Counted bool
	// Unlisted, for a type that moves, is what a backup misses when its identity may not list
	// the type (a schedule's, granted by a ferry from before the type moved): the plan then
	// leaves the type out with a warning instead of failing.
	Unlisted string

	// BoundTo, for a cluster-scoped type whose objects are bound to one namespace's object (a
	// volume to its claim, an admission webhook to its server's Service), is where they name it:
	// such an object goes with that namespace, and a selection that leaves the namespace out
	// leaves it out too.
	BoundTo *Binding

	// Capture drops from the object, before a backup stores it, what must never be stored (a
	// token that is a credential for the source cluster only).
	Capture func(obj map[string]any)
	// Normalize drops what the source cluster set in the object by itself. It runs before the
	// server-set metadata every object loses is dropped (a Service reads its managed fields).
	Normalize func(obj map[string]any)
	// StorageClasses are the specs, in place, that name a storage class a mapping changes.
	StorageClasses func(obj map[string]any) []map[string]any
	// Prepare maps the namespaces the object names in its content (namespace maps one).
	Prepare func(obj map[string]any, namespace func(string) string)
	// SkipOwned edits the prepared form when a restore leaves owned objects behind (--skip-owned).
	SkipOwned func(obj map[string]any)

	// Skip says why a restore does not create a backed-up object, as Velero's restore decides it
	// (docs/format.md, Velero compatibility), or "".
	Skip func(obj map[string]any) string
	// Released says why a restore does not create an object bound to a claim the backup does
	// not hold (claims: namespace/name), or "": a volume the source released.
	Released func(obj map[string]any, claims map[string]bool) string
	// Recreated says whether the target makes the object anew by itself once the rest is restored.
	// claims are the backup's claims (namespace/name); holds says whether the backup holds an object.
	Recreated func(obj map[string]any, claims map[string]bool, holds func(group, kind, namespace, name string) bool) bool
	// Default is how the type marks its default object, which stays each cluster's choice.
	Default *DefaultMark
	// Ready says whether the target is ready for what depends on the object (a CRD: its custom
	// resources); a restore waits for it.
	Ready func(obj map[string]any) bool

	// Live puts into a live object's normalized form (norm) what the target set that counts as
	// the backup's, so that it is not taken for a difference.
	Live func(norm, live map[string]any)
	// Renumber, given copies of the expected and the live object, returns the merge patch that
	// gives the live one the backup's revision numbering, and strips the numbering from both (the
	// caller renumbers only when nothing else differs); ok is false when expected has none.
	Renumber func(want, got map[string]any) (patch map[string]any, ok bool)
	// Merge, for an object the target makes by itself that the backup holds settings of (a
	// namespace's default ServiceAccount), returns the merge patch that adds the backup's
	// settings (want) to the target's object (live), or nil when it has them. It is applied
	// whatever the existing-object policy: the target's object holds nothing of its users.
	Merge func(want, live map[string]any) map[string]any
	// Remake, for a type of which the target refuses some changes (a ConfigMap or Secret marked
	// immutable, a StatefulSet's claim templates, as an operator grows its volumes, a binding's
	// role, a workload's selector, a Job's template, a PriorityClass's value, a Service's cluster
	// IP, a class's driver or handler), says why the
	// live object may not be deleted and made again as want instead, or "" when it may: an update
	// or replace the target refuses as invalid then does that, once a dry run shows the target
	// takes want. Nil: never.
	Remake func(live, want map[string]any) string
	// Recreate readies a live object to be made again as it was, when the target refuses the
	// backup's in its place after the delete (see Remake): it drops what names the object
	// deleted, which a new one's identity would contradict (a Job's controller UID labels).
	Recreate func(obj map[string]any)
	// Fixed, for a type with a field the target sets once and never changes in place that the
	// backup's normalized form may leave out (a Service's cluster IP, which the target allocates),
	// names how live differs from want in it, or "": a difference however the rest compares,
	// which only Remake mends (an update would keep the target's).
	Fixed func(want, live map[string]any) string
	// RemakeOrphans keeps the dependents of an object made again (a StatefulSet's pods and
	// claims, a Deployment's ReplicaSets, the history a restore just made among them) for the
	// new one to adopt; its history objects the new one does not select (its selector changed)
	// or the backup does not hold, and its pods unless RemakeAdoptsPods, are deleted then.
	// Other types' dependents go with the object.
	RemakeOrphans bool
	// RemakeAdoptsPods keeps the pods of an object made again that the new one selects (a
	// StatefulSet's, which hold its claims and names): its controller rolls them to the new
	// template. A DaemonSet would take them as up to date (by their template generation).
	RemakeAdoptsPods bool
	// RolloutHistory says where a workload keeps its rollout history, which verify compares.
	RolloutHistory *RolloutHistory
	// Revision is a history object's revision number.
	Revision func(obj map[string]any) int64
	// Health says whether a restored object is healthy, and if not why.
	Health func(obj map[string]any) (ok bool, why string)
	// NeverReady says whether the backup's copy (obj, with its status) was never ready, so that
	// the target's is not held to Health: a claim that had no volume stays pending until a pod
	// uses it (WaitForFirstConsumer), on the target as on the source.
	NeverReady func(obj map[string]any) bool
	// Secret marks content that is secret: a backup records a keyed digest of it, so that the
	// manifest, which is never encrypted, is no oracle for guessing it.
	Secret bool
}

// Binding is the reference of a cluster-scoped object to the namespaced object it is bound to.
type Binding struct {
	Field string // the spec's field holding the reference (with namespace and name)
	// Find, for a reference held elsewhere, returns its namespace instead of Field.
	Find func(obj map[string]any) string
	What string // what it references, for messages: "a claim"
}

// Namespace is the namespace of the object obj is bound to, or "" when it is bound to none.
func (b *Binding) Namespace(obj map[string]any) string {
	if b == nil {
		return ""
	}
	if b.Find != nil {
		return b.Find(obj)
	}
	ns, _, _ := unstructured.NestedString(obj, "spec", b.Field, "namespace")
	return ns
}

// RolloutHistory is where a workload's rollout history is: what kubectl rollout history lists and
// kubectl rollout undo goes back to.
type RolloutHistory struct {
	Kind string // the workload's kind, as its history objects' owner references name it
	In   string // the group-resource of its history objects
}

// The restore waves, in order: their indices (plans.Resource.Wave).
const (
	WaveCRDs = iota
	WaveNamespaces
	WaveStorage
	WaveConfig
	WaveRest
	WaveQuotas
	WaveWebhooks
)

// WaveName is a wave's name and the condition its objects are waited on for, if any.
type WaveName struct{ Name, WaitFor string }

// Waves names the restore waves, by index.
func Waves() []WaveName {
	return []WaveName{
		WaveCRDs:       {"custom resource definitions", "Established"},
		WaveNamespaces: {"namespaces", ""},
		WaveStorage:    {"storage", ""},
		WaveConfig:     {"identity and configuration", ""},
		WaveRest:       {"workloads and everything else", ""},
		WaveQuotas:     {"quotas", ""},
		WaveWebhooks:   {"admission webhooks", ""},
	}
}

// table is the read-only table of every kind's rules, built once by build.
var table = build()

// build gathers the rules of each kind's file, keyed by group-resource.
func build() map[string]Rule {
	out := map[string]Rule{}
	for _, set := range []map[string]Rule{
		crdRules(), namespaceRules(), storageClassRules(), claimRules(), volumeRules(), volumeSnapshotRules(),
		serviceAccountRules(), secretRules(), configMapRules(), rbacRules(), policyRules(), priorityClassRules(), runtimeClassRules(),
		serviceRules(), endpointsRules(), podRules(), jobRules(), deploymentRules(), replicaSetRules(),
		controllerRevisionRules(), statefulSetRules(), daemonSetRules(),
		webhookRules(), apiServiceRules(), certificateRules(), flowControlRules(), clusterRules(), infrastructureRules(),
	} {
		for gr, r := range set {
			if _, dup := out[gr]; dup {
				panic("rules: two rules for " + gr)
			}
			out[gr] = r
		}
	}
	return out
}

// For is the rule of a group-resource ("configmaps", "jobs.batch"); a type without one is restored
// with everything else (WaveRest) and has no quirks.
func For(gr string) Rule {
	if r, ok := table[gr]; ok {
		return r
	}
	return Rule{Wave: WaveRest}
}

// Types lists the group-resources that have a rule (for tests and documentation).
func Types() []string {
	out := make([]string, 0, len(table))
	for gr := range table {
		out = append(out, gr)
	}
	return out
}

// nestedMap is the map at path in m, in place (not a copy), or nil.
func nestedMap(m map[string]any, path ...string) map[string]any {
	v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	out, _ := v.(map[string]any)
	return out
}

// metadataAdded is the merge patch that adds want's labels and annotations to live's (a value
// want holds replaces live's), as a map to extend; empty when live holds them all.
func metadataAdded(want, live map[string]any) map[string]any {
	patch, meta := map[string]any{}, map[string]any{}
	for _, field := range []string{"labels", "annotations"} {
		have := nestedMap(live, "metadata", field)
		add := map[string]any{}
		for k, v := range nestedMap(want, "metadata", field) {
			if have[k] != v {
				add[k] = v
			}
		}
		if len(add) > 0 {
			meta[field] = add
		}
	}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	return patch
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// setAnnotation sets an annotation of obj, making its annotations when it has none.
func setAnnotation(obj map[string]any, key, value string) {
	meta := nestedMap(obj, "metadata")
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
		meta["annotations"] = annotations
	}
	annotations[key] = value
}

func deleteAnnotations(meta map[string]any, keys []string) { deleteKeys(meta, "annotations", keys) }

func deleteLabels(meta map[string]any, keys []string) { deleteKeys(meta, "labels", keys) }

// deleteKeys deletes keys from the metadata's map field (labels, annotations), and the field when
// it is left empty.
func deleteKeys(meta map[string]any, field string, keys []string) {
	m, ok := meta[field].(map[string]any)
	if !ok {
		return
	}
	for _, k := range keys {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(meta, field)
	}
}

// remade is the Remake of a type whose objects may always be made again.
func remade(_, _ map[string]any) string { return "" }

func conditionTrue(conds []any, typ string) bool {
	for _, c := range conds {
		cm := asMap(c)
		if cm["type"] == typ {
			return cm["status"] == "True"
		}
	}
	return false
}

// mapRefNamespace maps the namespace of a reference ({name, namespace}): a service's, a policy
// binding's parameters'.
func mapRefNamespace(svc map[string]any, namespace func(string) string) {
	if ns, ok := svc["namespace"].(string); ok {
		svc["namespace"] = namespace(ns)
	}
}

// same gives several group-resources one rule.
func same(r Rule, grs ...string) map[string]Rule {
	out := make(map[string]Rule, len(grs))
	for _, gr := range grs {
		out[gr] = r
	}
	return out
}

// ExcludeReason is why an object does not move, or "": one being deleted never does (made on the
// target it would not be being deleted there; Velero's backup leaves such objects out too), nor
// one a node owns (OwnedByNode), the others as the rule's Exclude says.
func (r Rule) ExcludeReason(obj map[string]any) string {
	if ts, _, _ := unstructured.NestedString(obj, "metadata", "deletionTimestamp"); ts != "" {
		return "being deleted on the source"
	}
	if why := OwnedByNode(obj); why != "" {
		return why
	}
	if r.Exclude == nil {
		return ""
	}
	return r.Exclude(obj)
}

// OwnedByNode says why an object a node owns does not move, or "": what a node's agents publish
// about it (its device slices, its network plugin's record) belongs to the source cluster's
// node, and the target has none of that name.
func OwnedByNode(obj map[string]any) string {
	for _, ref := range (&unstructured.Unstructured{Object: obj}).GetOwnerReferences() {
		if ref.Kind == "Node" && ref.APIVersion == "v1" {
			return "belongs to the source cluster's node " + ref.Name
		}
	}
	return ""
}

// SkipReason is Skip's or Released's reason (claims are the backup's), or "" when neither has one.
func (r Rule) SkipReason(obj map[string]any, claims map[string]bool) string {
	if r.Skip != nil {
		if why := r.Skip(obj); why != "" {
			return why
		}
	}
	if r.Released != nil {
		return r.Released(obj, claims)
	}
	return ""
}

// IsRecreated is Recreated's answer, false when the rule has none.
func (r Rule) IsRecreated(obj map[string]any, claims map[string]bool, holds func(group, kind, namespace, name string) bool) bool {
	return r.Recreated != nil && r.Recreated(obj, claims, holds)
}
