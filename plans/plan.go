// Package plans inventories a cluster and makes the Plan that backup, restore and migrate follow:
// what moves (objects by resource type and namespace, volumes, databases, buckets), what does not
// and why, in which order it is restored, how long it should take, and what stands in the way on
// the target.
package plans

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// APIVersion and Kind mark a plan file.
const (
	APIVersion = "ferry.dev/v1alpha1"
	Kind       = "Plan"
)

// Plan is the result of planning, and the file format ferry backup/migrate take back with --plan.
type Plan struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	CreatedAt  time.Time `json:"createdAt"`
	Source     Cluster   `json:"source"`
	Target     *Cluster  `json:"target,omitempty"`
	// Config is the effective configuration: ferry.yaml merged with its preset and the flags, all
	// but the run's traffic and rollout settings, which a plan (and a backup's manifest) does not
	// hold.
	Config config.Planning `json:"config"`
	// Resources are the resource types that move, in restore order.
	Resources []Resource    `json:"resources"`
	Waves     []Wave        `json:"waves"`
	CRDs      []CRD         `json:"crds,omitempty"`
	Excluded  []Exclusion   `json:"excluded"`
	Volumes   []Volume      `json:"volumes,omitempty"`
	Databases []DataItem    `json:"databases,omitempty"`
	Buckets   []DataItem    `json:"buckets,omitempty"`
	Tenants   []Tenant      `json:"tenants,omitempty"`
	Quiesce   []QuiesceItem `json:"quiesce,omitempty"`
	// NodePorts are the node ports users chose for Services: kept, so they must be free on the target.
	NodePorts []NodePort `json:"nodePorts,omitempty"`
	// ClusterIPs are the cluster IPs users chose for Services: kept, so they must be free on the
	// target and within its service ranges.
	ClusterIPs []ClusterIP `json:"clusterIPs,omitempty"`
	// Upgrade is set by ferry plan --upgrade: what moves, what green's release provides, and how
	// the two releases differ (see upgrade.go).
	Upgrade  *Upgrade  `json:"upgrade,omitempty"`
	Estimate Estimate  `json:"estimate"`
	Findings []Finding `json:"findings,omitempty"`
}

// Cluster identifies a cluster.
type Cluster struct {
	Context string `json:"context,omitempty"`
	Server  string `json:"server"`
	Version string `json:"version"`
	// UID of the kube-system namespace: stable for the cluster's life, different on every cluster.
	UID string `json:"uid,omitempty"`
}

// Same says whether c and o are known to be one cluster: both recorded its UID.
func (c Cluster) Same(o Cluster) bool { return c.UID != "" && c.UID == o.UID }

// Resource is one resource type that moves.
type Resource struct {
	Group      string `json:"group,omitempty"`
	Version    string `json:"version"`
	Resource   string `json:"resource"`
	Kind       string `json:"kind"`
	Namespaced bool   `json:"namespaced"`
	Wave       int    `json:"wave"`
	Count      int    `json:"count"`
	Bytes      int64  `json:"bytes"`
	// Namespaces counts the objects per namespace (namespaced resources only).
	Namespaces map[string]Count `json:"namespaces,omitempty"`
	// OwnedBy lists the resource types owning some of these objects; they are restored earlier,
	// but for rollout history (ReplicaSets, ControllerRevisions), which comes before its owners.
	OwnedBy []string `json:"ownedBy,omitempty"`
}

// Count is objects and their bytes (as JSON).
type Count struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

// GroupResource is the resource's name as kubectl writes it: configmaps, deployments.apps.
func (r Resource) GroupResource() string { return groupResource(r.Group, r.Resource) }

func groupResource(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// Wave is a step of the restore: its resource types are applied together, after the earlier waves.
type Wave struct {
	Index     int      `json:"index"`
	Name      string   `json:"name"`
	Resources []string `json:"resources"`
	// WaitFor says what must hold before the next wave starts.
	WaitFor string `json:"waitFor,omitempty"`
}

// CRD describes a CustomResourceDefinition in the plan.
type CRD struct {
	Name           string   `json:"name"`
	Group          string   `json:"group"`
	Kind           string   `json:"kind"`
	Scope          string   `json:"scope"`
	ServedVersions []string `json:"servedVersions"`
	StorageVersion string   `json:"storageVersion"`
	StoredVersions []string `json:"storedVersions,omitempty"`
	Conversion     string   `json:"conversion"`
	Count          int      `json:"customResources"`
}

// Exclusion is something that does not move, and why.
type Exclusion struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"` // empty: every object counted
	Count     int    `json:"count"`
	Reason    string `json:"reason"`
}

// Volume is a PersistentVolumeClaim whose contents move.
type Volume struct {
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	Capacity     string `json:"capacity"`
	Bytes        int64  `json:"bytes"`
	StorageClass string `json:"storageClass,omitempty"`
	// NoClass is set when the claim names no class outright (storageClassName ""): it binds only
	// to a volume made by hand, never to a provisioner's.
	NoClass bool `json:"noClass,omitempty"`
	// Selector is the claim's spec.selector: it binds only to a volume whose labels match, which
	// someone made, never to a provisioner's.
	Selector    *metav1.LabelSelector `json:"selector,omitempty"`
	AccessModes []string              `json:"accessModes"`
	Phase       string                `json:"phase"`
	VolumeName  string                `json:"volumeName,omitempty"`
	// VolumeMode is the claim's volumeMode when it is not a filesystem ("Block").
	VolumeMode string   `json:"volumeMode,omitempty"`
	Pods       []PodUse `json:"pods,omitempty"`
	// Holds names the database or bucket whose files these are: they move as a consistent dump or
	// copy of that item, not as files.
	Holds string `json:"holds,omitempty"`
}

// FilesUnread says why no mover reads the claim's files, or "" when one does: it holds a database
// or bucket (which move as such), it is not bound, or it is a raw block device, which has no files.
func (v Volume) FilesUnread() string {
	switch {
	case v.Holds != "":
		return "its files move as " + v.Holds
	case v.Phase != "Bound":
		return "the claim is " + strings.ToLower(cmp.Or(v.Phase, "unknown")) + ": it has no volume to read"
	case v.VolumeMode == "Block":
		return blockVolume
	}
	return ""
}

// NoVolumeYet says whether the claim was planned without a volume, as it never had one
// (rules.NeverBound): there is no data to copy, only the claim's object.
func (v Volume) NoVolumeYet() bool { return rules.NeverBound(v.Phase, v.VolumeName) }

// blockVolume is why a block-mode claim's data does not move.
const blockVolume = "a raw block volume: ferry moves files, not devices, so its data is left out; copy it another way"

// PodUse is a pod mounting a volume.
type PodUse struct {
	Name     string `json:"name"`
	Node     string `json:"node,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Placement is which nodes the pod may run on. A restore's mover of a claim whose volume is
	// made where its first pod runs (WaitForFirstConsumer) is placed so: a zonal volume made
	// where the mover ran would keep the workload off its own nodes.
	Placement *NodePlacement `json:"placement,omitempty"`
}

// NodePlacement is what of a pod's spec says which nodes it may run on.
type NodePlacement struct {
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// NodeAffinity is the node affinity required during scheduling.
	NodeAffinity *corev1.NodeSelector `json:"nodeAffinity,omitempty"`
	Tolerations  []corev1.Toleration  `json:"tolerations,omitempty"`
}

// placementOf is a pod's placement, or nil when it says nothing of nodes.
func placementOf(spec corev1.PodSpec) *NodePlacement {
	p := NodePlacement{NodeSelector: spec.NodeSelector}
	for _, t := range spec.Tolerations {
		// Admission gives every pod these (the mover too): they say nothing of the pod.
		if t.Effect == corev1.TaintEffectNoExecute && (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) {
			continue
		}
		p.Tolerations = append(p.Tolerations, t)
	}
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil {
		p.NodeAffinity = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if len(p.NodeSelector) == 0 && p.NodeAffinity == nil && len(p.Tolerations) == 0 {
		return nil
	}
	return &p
}

// DataItem is a database or bucket found (or not) on the cluster.
type DataItem struct {
	Name      string `json:"name"`
	Engine    string `json:"engine,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Workload  string `json:"workload,omitempty"`
	Endpoint  string `json:"endpoint,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Node      string `json:"node,omitempty"`
	Secret    string `json:"secret,omitempty"`
	// Volume is the (first) claim holding the data; Volumes are all of them (a StatefulSet's
	// replicas each have theirs). Their capacity bounds the estimate.
	Volume  string   `json:"volume,omitempty"`
	Volumes []string `json:"volumes,omitempty"`
	Bytes   int64    `json:"bytes,omitempty"`
	Found   bool     `json:"found"`
	// Problem says what is missing when Found is false.
	Problem string `json:"problem,omitempty"`
}

// Tenant is an object of the tenants resource (a Kubeflow Profile) and its namespace.
type Tenant struct {
	Name            string `json:"name"`
	Owner           string `json:"owner,omitempty"`
	Namespace       string `json:"namespace"`
	NamespaceExists bool   `json:"namespaceExists"`
}

// QuiesceItem is an object to stop before the snapshot.
type QuiesceItem struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Action    string `json:"action"`
	Why       string `json:"why,omitempty"`
}

// Estimate is the predicted size and duration of a backup (and, alike, of a restore).
type Estimate struct {
	Objects       int           `json:"objects"`
	ObjectBytes   int64         `json:"objectBytes"`
	VolumeBytes   int64         `json:"volumeBytes"`
	DatabaseBytes int64         `json:"databaseBytes"`
	BucketBytes   int64         `json:"bucketBytes"`
	Duration      time.Duration `json:"duration"`
	// Basis says how the figures were made, so nobody takes a bound for a measurement.
	Basis string `json:"basis"`
}

// Finding is a problem the plan or the target preflight found.
type Finding struct {
	Severity string `json:"severity"` // blocking or warning
	Subject  string `json:"subject"`
	Message  string `json:"message"`
}

// Severities of findings.
const (
	Blocking = "blocking"
	Warning  = "warning"
)

// NotDiscovered begins the warning about a group and version (its subject) whose discovery failed
// on the cluster: none of its objects are in the plan, which says nothing of whether they exist.
const NotDiscovered = "API group not discovered"

// Undiscovered names the API groups ("" for the core group) whose discovery failed, each with
// its warning.
func (p *Plan) Undiscovered() map[string]string {
	out := map[string]string{}
	for _, f := range p.Findings {
		if f.Severity != Warning || !strings.HasPrefix(f.Message, NotDiscovered) {
			continue
		}
		group, _, found := strings.Cut(f.Subject, "/")
		if !found {
			group = "" // "v1": the core group
		}
		out[group] = f.Subject + ": " + f.Message
	}
	return out
}

// Blocking reports whether any finding blocks the move.
func (p *Plan) Blocking() []Finding {
	var out []Finding
	for _, f := range p.Findings {
		if f.Severity == Blocking {
			out = append(out, f)
		}
	}
	return out
}

func (p *Plan) warn(subject, format string, args ...any) {
	p.Findings = append(p.Findings, Finding{Severity: Warning, Subject: subject, Message: fmt.Sprintf(format, args...)})
}

func (p *Plan) block(subject, format string, args ...any) {
	p.Findings = append(p.Findings, Finding{Severity: Blocking, Subject: subject, Message: fmt.Sprintf(format, args...)})
}

// Marshal renders the plan as "yaml" or "json".
func (p *Plan) Marshal(format string) ([]byte, error) {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil || format == "json" {
		return append(data, '\n'), err
	}
	return yaml.JSONToYAML(data)
}

// ReadFile reads a plan written by ferry plan, as YAML or JSON.
func ReadFile(path string) (*Plan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, badinput.Errorf("plan: %w", err)
	}
	// A plan file an older ferry wrote holds the whole ferry.yaml, traffic and rollout too: read
	// strictly as such, and kept without them.
	var file struct {
		Plan
		Config config.Config `json:"config"`
	}
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		return nil, badinput.Errorf("%s: %v", path, err)
	}
	p := file.Plan
	if p.APIVersion != APIVersion || p.Kind != Kind {
		return nil, badinput.Errorf("%s: not a ferry plan (apiVersion %q, kind %q; want %s %s)", path, p.APIVersion, p.Kind, APIVersion, Kind)
	}
	if err := file.Config.Validate(); err != nil {
		return nil, badinput.Errorf("%s: config.%w", path, err)
	}
	p.Config = file.Config.Planning
	return &p, nil
}

// WriteFile writes the plan as YAML, or JSON when path ends in .json.
func (p *Plan) WriteFile(path string) error {
	format := "yaml"
	if strings.HasSuffix(path, ".json") {
		format = "json"
	}
	data, err := p.Marshal(format)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	return nil
}
