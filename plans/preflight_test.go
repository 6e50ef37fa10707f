package plans

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// TestPreflight: each check of a target against a plan, alone: what blocks, what warns, and
// what a mapping or a CRD of the plan makes fine.
func TestPreflight(t *testing.T) {
	configMaps := Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Count: 2, Namespaces: map[string]Count{"shop": {Count: 2}}}
	widgets := Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Count: 3, Namespaces: map[string]Count{"shop": {Count: 3}}}
	statefulSets := Resource{Group: "apps", Version: "v1", Resource: "statefulsets", Kind: "StatefulSet", Namespaced: true, Count: 1, Namespaces: map[string]Count{"shop": {Count: 1}}}
	kubeSystem := Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Count: 1, Namespaces: map[string]Count{"kube-system": {Count: 1}}}
	fast := Volume{Namespace: "shop", Name: "data", StorageClass: "fast"}
	noClass := Volume{Namespace: "shop", Name: "scratch"}
	handMade := Volume{Namespace: "shop", Name: "share", NoClass: true}
	preBound := func(ns, claim string) runtime.Object {
		u := object("v1", "PersistentVolume", "", "nfs-"+claim)
		u.Object["spec"] = map[string]any{"storageClassName": "", "claimRef": map[string]any{"namespace": ns, "name": claim}}
		return u
	}
	released := func(ns, claim string) runtime.Object {
		u := object("v1", "PersistentVolume", "", "old-"+claim)
		u.Object["spec"] = map[string]any{"storageClassName": "", "claimRef": map[string]any{"namespace": ns, "name": claim, "uid": "gone"}}
		return u
	}
	selecting := Volume{Namespace: "shop", Name: "cache", StorageClass: "standard", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "ssd"}}}
	local := Volume{Namespace: "shop", Name: "scratch-local", StorageClass: "local-storage"}
	free := func(name, class string, labels map[string]string) runtime.Object {
		u := object("v1", "PersistentVolume", "", name)
		u.SetLabels(labels)
		u.Object["spec"] = map[string]any{"storageClassName": class}
		u.Object["status"] = map[string]any{"phase": "Available"}
		return u
	}
	staticClass := object("storage.k8s.io/v1", "StorageClass", "", "local-storage")
	staticClass.Object["provisioner"] = "kubernetes.io/no-provisioner"
	class := func(name string, isDefault bool) runtime.Object {
		u := object("storage.k8s.io/v1", "StorageClass", "", name)
		if isDefault {
			u.SetAnnotations(map[string]string{"storageclass.kubernetes.io/is-default-class": "true"})
		}
		return u
	}
	webhook := func(policy string) runtime.Object {
		u := object("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "policy")
		u.Object["webhooks"] = []any{map[string]any{"name": "check.example.com", "failurePolicy": policy,
			"clientConfig": map[string]any{"service": map[string]any{"namespace": "hooks", "name": "checker"}}}}
		return u
	}
	minio := config.Bucket{Name: "mlpipeline", Namespace: "kubeflow", Workload: "deployment/minio", Port: 9000}
	moved := minio
	moved.Target = &config.BucketTarget{Workload: "deployment/seaweedfs", Port: 8333}
	storeMoved := Plan{Config: config.Planning{Buckets: []config.Bucket{moved}}, Buckets: []DataItem{{Name: "mlpipeline", Namespace: "kubeflow", Found: true}}}
	storeReplaced := Plan{Config: config.Planning{Buckets: []config.Bucket{minio}, Platform: config.ReleasePart{Namespaces: []string{"kubeflow"}}},
		Buckets: []DataItem{{Name: "mlpipeline", Namespace: "kubeflow", Found: true}}, Upgrade: &Upgrade{}}
	storeMovedUpgrade := storeMoved
	storeMovedUpgrade.Upgrade = &Upgrade{}
	keys := minio
	keys.Target = &config.BucketTarget{Secret: &config.SecretRef{Name: "green-keys"}}
	otherKeys := Plan{Config: config.Planning{Buckets: []config.Bucket{keys}}, Buckets: []DataItem{{Name: "mlpipeline", Namespace: "kubeflow", Found: true}},
		Resources: []Resource{{Group: "apps", Version: "v1", Resource: "deployments", Kind: "Deployment", Namespaced: true, Count: 1, Namespaces: map[string]Count{"kubeflow": {Count: 1}}}}}
	otherKeysUpgrade := otherKeys
	otherKeysUpgrade.Upgrade = &Upgrade{}
	otherKeysUpgrade.Config.Platform = config.ReleasePart{Namespaces: []string{"other"}}
	secret := func(name string, keys ...string) runtime.Object {
		u := object("v1", "Secret", "kubeflow", name)
		data := map[string]any{}
		for _, k := range keys {
			data[k] = "c2VjcmV0"
		}
		u.Object["data"] = data
		return u
	}
	namedKeys := minio
	namedKeys.Target = &config.BucketTarget{Secret: &config.SecretRef{Name: "green-keys", AccessKey: "accesskey", SecretKey: "secretkey"}}
	otherNamedKeys := otherKeys
	otherNamedKeys.Config = config.Planning{Buckets: []config.Bucket{namedKeys}}
	type finding struct{ severity, subject, message string }
	for _, tc := range []struct {
		name     string
		plan     Plan
		target   string // its name; "blue" is the source
		version  string
		leaveOut []string
		objs     []runtime.Object
		want     []finding
	}{
		{name: "clean", plan: Plan{Resources: []Resource{configMaps, kubeSystem}}},
		{name: "the source itself", target: "blue", plan: Plan{Resources: []Resource{configMaps}},
			want: []finding{{Blocking, "target", "the target is the source cluster (kube-system UID uid-blue)"}}},
		{name: "older target", version: "v1.36.9", plan: Plan{Resources: []Resource{configMaps}},
			want: []finding{{Warning, "target", "Kubernetes v1.36.9 is older than the source's v1.37.2"}}},
		{name: "newer patch only", version: "v1.37.0+k3s1", plan: Plan{Resources: []Resource{configMaps}}},
		{name: "type not served", leaveOut: []string{"widgets"}, plan: Plan{Resources: []Resource{configMaps, widgets}},
			want: []finding{{Blocking, "widgets.example.com", "the target does not serve widgets.example.com and no CRD in the plan provides it (3 objects)"}}},
		{name: "type from a CRD of the plan", leaveOut: []string{"widgets"}, plan: Plan{Resources: []Resource{widgets}, CRDs: []CRD{{Name: "widgets.example.com"}}}},
		{name: "storage class missing", plan: Plan{Volumes: []Volume{fast}}, objs: []runtime.Object{class("standard", true)},
			want: []finding{{Blocking, "storageclass fast", "the target has no storage class fast; 1 claim uses it (e.g. shop/data); create it or map it with --storage-class-map fast=OTHER"}}},
		{name: "storage class mapped", plan: Plan{Volumes: []Volume{fast}, Config: config.Planning{StorageClassMap: map[string]string{"fast": "standard"}}},
			objs: []runtime.Object{class("standard", false)}},
		{name: "no default class", plan: Plan{Volumes: []Volume{noClass}}, objs: []runtime.Object{class("standard", false)},
			want: []finding{{Blocking, "storageclass (default)", "1 claim uses the default storage class, and the target has none"}}},
		{name: "default class", plan: Plan{Volumes: []Volume{noClass}}, objs: []runtime.Object{class("standard", true)}},
		{name: "a claim of no class, no volume for it", plan: Plan{Volumes: []Volume{handMade}}, objs: []runtime.Object{class("standard", true), preBound("shop", "other")},
			want: []finding{{Blocking, `storageclass ""`, `1 claim uses no class (storageClassName ""), so only a volume made by hand binds them, and the target has none for them (e.g. shop/share): map them to a class of the target with --storage-class-map =CLASS`}}},
		{name: "a claim of no class, its volume made", plan: Plan{Volumes: []Volume{handMade}}, objs: []runtime.Object{preBound("shop", "share")}},
		{name: "a claim of no class, a released volume of its name", plan: Plan{Volumes: []Volume{handMade}}, objs: []runtime.Object{released("shop", "share")},
			want: []finding{{Blocking, `storageclass ""`, "(e.g. shop/share)"}}},
		{name: "a claim of no class, its volume made in the mapped namespace", plan: Plan{Volumes: []Volume{handMade}, Config: config.Planning{NamespaceMap: map[string]string{"shop": "shop-green"}}},
			objs: []runtime.Object{preBound("shop-green", "share")}},
		{name: "a claim the target has already", plan: Plan{Volumes: []Volume{fast, handMade}}, objs: []runtime.Object{object("v1", "PersistentVolumeClaim", "shop", "data"), object("v1", "PersistentVolumeClaim", "shop", "share")}},
		{name: "a claim of no class mapped", plan: Plan{Volumes: []Volume{handMade}, Config: config.Planning{StorageClassMap: map[string]string{"": "standard"}}},
			objs: []runtime.Object{class("standard", false)}},
		{name: "the empty class maps no claim that names none", plan: Plan{Volumes: []Volume{noClass}, Config: config.Planning{StorageClassMap: map[string]string{"": "standard"}}},
			objs: []runtime.Object{class("standard", false)},
			want: []finding{{Blocking, "storageclass (default)", "1 claim uses the default storage class, and the target has none"}}},
		{name: "a claim that selects its volume, none there", plan: Plan{Volumes: []Volume{selecting}}, objs: []runtime.Object{class("standard", true), free("pv-hdd", "standard", map[string]string{"disk": "hdd"})},
			want: []finding{{Blocking, "storageclass standard", `1 claim selects a volume by labels (spec.selector), which no provisioner serves, and the target has no free volume of class standard that matches (e.g. shop/cache)`}}},
		{name: "a claim that selects its volume, one there", plan: Plan{Volumes: []Volume{selecting}}, objs: []runtime.Object{class("standard", true), free("pv-ssd", "standard", map[string]string{"disk": "ssd"})}},
		{name: "a claim of a class that provisions nothing, no volume", plan: Plan{Volumes: []Volume{local}}, objs: []runtime.Object{staticClass},
			want: []finding{{Blocking, "storageclass local-storage", `1 claim uses class local-storage, whose provisioner makes no volumes (kubernetes.io/no-provisioner), and the target has no free volume of it (e.g. shop/scratch-local)`}}},
		{name: "a claim of a class that provisions nothing, a volume made", plan: Plan{Volumes: []Volume{local}}, objs: []runtime.Object{staticClass, free("local-pv-1", "local-storage", nil)}},
		{name: "a claim of a class that provisions nothing, a volume of other access modes", plan: Plan{Volumes: []Volume{{Namespace: "shop", Name: "shared", StorageClass: "local-storage", AccessModes: []string{"ReadWriteMany"}}}},
			objs: []runtime.Object{staticClass, free("local-pv-1", "local-storage", nil)},
			want: []finding{{Blocking, "storageclass local-storage", `(e.g. shop/shared)`}}},
		{name: "two claims of a class that provisions nothing, one volume", plan: Plan{Volumes: []Volume{local, {Namespace: "shop", Name: "scratch-2", StorageClass: "local-storage"}}},
			objs: []runtime.Object{staticClass, free("local-pv-1", "local-storage", nil)},
			want: []finding{{Blocking, "storageclass local-storage", `1 claim uses class local-storage, whose provisioner makes no volumes (kubernetes.io/no-provisioner), and the target has no free volume of it (e.g. shop/scratch-2)`}}},
		{name: "namespace exists", plan: Plan{Resources: []Resource{configMaps}}, objs: []runtime.Object{object("v1", "Namespace", "", "shop")},
			want: []finding{{Warning, "namespace shop", "already exists on the target"}}},
		{name: "mapped namespace exists", plan: Plan{Resources: []Resource{configMaps}, Config: config.Planning{NamespaceMap: map[string]string{"shop": "shop-green"}}},
			objs: []runtime.Object{object("v1", "Namespace", "", "shop"), object("v1", "Namespace", "", "shop-green")},
			want: []finding{{Warning, "namespace shop-green", "already exists on the target"}}},
		{name: "webhook fails closed", plan: Plan{Resources: []Resource{configMaps}}, objs: []runtime.Object{webhook("Fail")},
			want: []finding{{Blocking, "validatingwebhookconfigurations policy", "webhook check.example.com calls service hooks/checker, which does not exist on the target, and fails closed"}}},
		{name: "webhook ignored", plan: Plan{Resources: []Resource{configMaps}}, objs: []runtime.Object{webhook("Ignore")},
			want: []finding{{Warning, "validatingwebhookconfigurations policy", "(failurePolicy Ignore)"}}},
		{name: "a bucket's target section names a workload the target lacks", plan: storeMoved, objs: []runtime.Object{object("apps/v1", "Deployment", "kubeflow", "minio")},
			want: []finding{{Warning, "bucket mlpipeline", "the target runs no deployment/seaweedfs in namespace kubeflow, where the bucket's target section keeps it, unless objects the restore makes create it"}}},
		{name: "an upgrade's target section names a workload green lacks", plan: storeMovedUpgrade,
			want: []finding{{Blocking, "bucket mlpipeline", "green's release runs no deployment/seaweedfs in namespace kubeflow, where the bucket's target section keeps it"}}},
		{name: "a target section of other credentials alone, the workload made by the restore", plan: otherKeys, objs: []runtime.Object{secret("green-keys")}},
		// The target's credentials are read after the quiesce: their Secret must be there.
		{name: "a target section's Secret missing", plan: otherKeys,
			want: []finding{{Warning, "bucket mlpipeline", "the bucket's target section names credentials the target lacks: secret kubeflow/green-keys not found, unless objects the restore makes create them"}}},
		{name: "an upgrade's target section's Secret missing", plan: otherKeysUpgrade, objs: []runtime.Object{object("apps/v1", "Deployment", "kubeflow", "minio")},
			want: []finding{{Blocking, "bucket mlpipeline", "the bucket's target section names credentials green lacks: secret kubeflow/green-keys not found"}}},
		{name: "a target section's Secret without a key", plan: otherNamedKeys, objs: []runtime.Object{secret("green-keys", "accesskey")},
			want: []finding{{Warning, "bucket mlpipeline", "secret kubeflow/green-keys has no key secretkey"}}},
		{name: "a target section's Secret with its keys", plan: otherNamedKeys, objs: []runtime.Object{secret("green-keys", "accesskey", "secretkey")}},
		{name: "a bucket's target section names a workload the target runs", plan: storeMoved, objs: []runtime.Object{object("apps/v1", "Deployment", "kubeflow", "seaweedfs")}},
		{name: "an upgrade onto a release without blue's store", plan: storeReplaced,
			want: []finding{{Blocking, "bucket mlpipeline", "green's release runs no deployment/minio in namespace kubeflow, where blue keeps the bucket, and the upgrade leaves blue's to the release: name where green keeps it in the bucket's target section"}}},
		{name: "an upgrade onto a release with blue's store", plan: storeReplaced, objs: []runtime.Object{object("apps/v1", "Deployment", "kubeflow", "minio")}},
		{name: "a migration makes the database's workload", plan: Plan{Config: config.Planning{Databases: []config.Database{{Name: "db", Engine: "mysql", Namespace: "shop", Workload: "statefulset/db"}}},
			Databases: []DataItem{{Name: "db", Engine: "mysql", Found: true}}, Resources: []Resource{statefulSets}}},
		{name: "a migration that leaves the database's workload out", plan: Plan{Config: config.Planning{Databases: []config.Database{{Name: "db", Engine: "mysql", Namespace: "shop", Workload: "statefulset/db"}}},
			Databases: []DataItem{{Name: "db", Engine: "mysql", Found: true}}, Resources: []Resource{configMaps}},
			want: []finding{{Blocking, "database db", "the target runs no statefulset/db in namespace shop, where the source keeps the database, and the restore does not make it (the selection leaves out the statefulsets.apps there)"}}},
		{name: "webhook's service there", plan: Plan{Resources: []Resource{configMaps}}, objs: []runtime.Object{webhook("Fail"), object("v1", "Service", "hooks", "checker")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.target == "" {
				tc.target = "green"
			}
			if tc.version == "" {
				tc.version = "v1.37.2"
			}
			target, _ := fakeClients(tc.target, tc.version, tc.leaveOut, tc.objs...)
			p := tc.plan
			p.Source = Cluster{UID: "uid-blue", Version: "v1.37.2"}
			if err := Preflight(context.Background(), &p, target, "green"); err != nil {
				t.Fatal(err)
			}
			if p.Target == nil || p.Target.UID != "uid-"+tc.target || p.Target.Context != "green" {
				t.Errorf("target %+v", p.Target)
			}
			if len(p.Findings) != len(tc.want) {
				t.Fatalf("findings %+v, want %+v", p.Findings, tc.want)
			}
			for i, w := range tc.want {
				f := p.Findings[i]
				if f.Severity != w.severity || f.Subject != w.subject || !strings.Contains(f.Message, w.message) {
					t.Errorf("finding %+v, want %+v", f, w)
				}
			}
		})
	}
}

// TestPreflightFails: a target that cannot be read fails the preflight, naming what could not
// be read, rather than passing it.
func TestPreflightFails(t *testing.T) {
	for _, tc := range []struct{ verb, resource, want string }{
		{"list", "storageclasses", "target: list storage classes"},
		{"list", "persistentvolumeclaims", "target: list persistent volume claims"},
		{"list", "persistentvolumes", "target: list persistent volumes"},
		{"get", "namespaces", "target: get namespace shop"},
		{"list", "validatingwebhookconfigurations", "target: list validatingwebhookconfigurations"},
	} {
		t.Run(tc.verb+" "+tc.resource, func(t *testing.T) {
			target, dyn := fakeClients("green", "v1.37.2", nil)
			dyn.PrependReactor(tc.verb, tc.resource, func(a clienttesting.Action) (bool, runtime.Object, error) {
				if tc.resource == "namespaces" && a.(clienttesting.GetAction).GetName() == "kube-system" {
					return false, nil, nil
				}
				return true, nil, errors.New("connection reset")
			})
			p := &Plan{Resources: []Resource{{Version: "v1", Resource: "configmaps", Namespaced: true, Count: 1, Namespaces: map[string]Count{"shop": {Count: 1}}}},
				Volumes: []Volume{{Namespace: "shop", Name: "share", NoClass: true}}}
			if err := Preflight(context.Background(), p, target, "green"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("preflight: %v, want %q", err, tc.want)
			}
		})
	}
}
