package resources

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/sirupsen/logrus"
	"github.com/vmware-tanzu/velero/pkg/archive"
	"github.com/vmware-tanzu/velero/pkg/util/filesystem"
)

// TestArchiveReadsWithVelero feeds an archive ferry writes to Velero's own extractor and parser, the
// code a Velero restore runs, and checks every object comes back from both trees.
func TestArchiveReadsWithVelero(t *testing.T) {
	objects := []struct {
		group, version, resource, kind, ns, name string
	}{
		{"", "v1", "configmaps", "ConfigMap", "kubeflow", "pipeline-install-config"},
		{"apps", "v1", "deployments", "Deployment", "kubeflow", "ml-pipeline"},
		{"", "v1", "namespaces", "Namespace", "", "kubeflow"},
		{"kubeflow.org", "v1", "profiles", "Profile", "", "alice"},
	}
	items := make(chan item, len(objects))
	for _, o := range objects {
		apiVersion := o.version
		if o.group != "" {
			apiVersion = o.group + "/" + o.version
		}
		meta := map[string]any{"name": o.name}
		if o.ns != "" {
			meta["namespace"] = o.ns
		}
		data, _ := json.Marshal(map[string]any{"apiVersion": apiVersion, "kind": o.kind, "metadata": meta})
		gr := o.resource
		if o.group != "" {
			gr += "." + o.group
		}
		scope := "cluster"
		if o.ns != "" {
			scope = "namespaces/" + o.ns
		}
		items <- item{
			paths: []string{"resources/" + gr + "/" + scope + "/" + o.name + ".json", "resources/" + gr + "/" + o.version + "-preferredversion/" + scope + "/" + o.name + ".json"},
			data:  data,
			obj:   snapshot.Object{Group: o.group, Version: o.version, Kind: o.kind, Resource: o.resource, Namespace: o.ns, Name: o.name},
		}
	}
	close(items)
	var buf bytes.Buffer
	if _, _, _, err := writeArchive(&buf, items); err != nil {
		t.Fatal(err)
	}

	log := logrus.New()
	fs := filesystem.NewFileSystem()
	dir, err := archive.NewExtractor(log, fs).UnzipAndExtractBackup(&buf)
	if err != nil {
		t.Fatalf("Velero cannot extract the archive: %v", err)
	}
	defer fs.RemoveAll(dir)
	parser := archive.NewParser(log, fs)
	resources, err := parser.Parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	versions, err := parser.ParseGroupVersions(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		gr := o.resource
		if o.group != "" {
			gr += "." + o.group
		}
		items := resources[gr]
		if items == nil {
			t.Fatalf("Velero finds no %s", gr)
		}
		names := items.ItemsByNamespace[o.ns] // "" holds cluster-scoped items
		if len(names) != 1 || names[0] != o.name {
			t.Errorf("%s in %q: Velero finds %v, want %s", gr, o.ns, names, o.name)
		}
		if v := versions[gr].PreferredVersion.Version; v != o.version {
			t.Errorf("%s: Velero's preferred version %q, want %q", gr, v, o.version)
		}
		sub := filepath.Join(dir, "resources", gr, "cluster", o.name+".json")
		if o.ns != "" {
			sub = filepath.Join(dir, "resources", gr, "namespaces", o.ns, o.name+".json")
		}
		obj, err := archive.Unmarshal(fs, sub)
		if err != nil || obj.GetName() != o.name || obj.GetKind() != o.kind {
			t.Errorf("Velero's Unmarshal of %s: %v, %v", sub, obj, err)
		}
	}
}

// TestClusterOwnStays: what a backup made before a type's rule (or Velero's) holds of the source
// cluster's own records stays there: types that never move, objects a node owns, and a Velero
// backup's kube-system.
func TestClusterOwnStays(t *testing.T) {
	nodeOwned := map[string]any{"metadata": map[string]any{"name": "c", "ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Node", "name": "worker-1", "uid": "u"}}}}
	for _, tc := range []struct {
		name   string
		velero bool
		e      Entry
		want   bool
	}{
		{"an address block of Calico's", false, Entry{GroupResource: "ipamblocks.crd.projectcalico.org", Name: "10-244-0-0-26"}, true},
		{"a node's ConfigMap", false, Entry{GroupResource: "configmaps", Namespace: "a", Name: "c", Object: nodeOwned}, true},
		{"a ConfigMap", false, Entry{GroupResource: "configmaps", Namespace: "a", Name: "c", Object: map[string]any{}}, false},
		{"a ConfigMap not read yet", false, Entry{GroupResource: "configmaps", Namespace: "a", Name: "c"}, false},
		{"kube-system of ferry's backup", false, Entry{GroupResource: "configmaps", Namespace: "kube-system", Name: "c"}, false},
		{"kube-system of Velero's backup", true, Entry{GroupResource: "configmaps", Namespace: "kube-system", Name: "c"}, true},
		{"a webhook kube-system serves, of Velero's backup", true, Entry{GroupResource: "validatingwebhookconfigurations.admissionregistration.k8s.io", Name: "w",
			Object: map[string]any{"webhooks": []any{map[string]any{"clientConfig": map[string]any{"service": map[string]any{"namespace": "kube-system", "name": "s"}}}}}}, true},
		{"a webhook a tenant serves, of Velero's backup", true, Entry{GroupResource: "validatingwebhookconfigurations.admissionregistration.k8s.io", Name: "w",
			Object: map[string]any{"webhooks": []any{map[string]any{"clientConfig": map[string]any{"service": map[string]any{"namespace": "team-a", "name": "s"}}}}}}, false},
	} {
		if got := (Objects{velero: tc.velero}).clusterOwn(tc.e); got != tc.want {
			t.Errorf("%s: clusterOwn %v, want %v", tc.name, got, tc.want)
		}
	}
}
