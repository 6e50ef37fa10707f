package plans

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
)

func TestCompareReleases(t *testing.T) {
	crd := func(name, kind, storage string, served ...string) CRD {
		return CRD{Name: name, Kind: kind, StorageVersion: storage, ServedVersions: served}
	}
	comp := func(kind, ns, name string, containers ...Container) Component {
		return Component{Kind: kind, Namespace: ns, Name: name, Containers: containers}
	}
	for _, tc := range []struct {
		name        string
		blue, green Release
		want        ReleaseDiff
	}{
		{name: "same release", blue: Release{Namespaces: []string{"kubeflow"}, CRDs: []CRD{crd("a.x", "A", "v1", "v1")}, Components: []Component{comp("Deployment", "kubeflow", "m", Container{Name: "c", Image: "i:1"})}},
			green: Release{Namespaces: []string{"kubeflow"}, CRDs: []CRD{crd("a.x", "A", "v1", "v1")}, Components: []Component{comp("Deployment", "kubeflow", "m", Container{Name: "c", Image: "i:1"})}}},
		{name: "CRDs added and removed",
			blue:  Release{CRDs: []CRD{crd("pytorchjobs.kubeflow.org", "PyTorchJob", "v1", "v1"), crd("tfjobs.kubeflow.org", "TFJob", "v1", "v1")}},
			green: Release{CRDs: []CRD{crd("trainjobs.trainer.kubeflow.org", "TrainJob", "v1alpha1", "v1alpha1")}},
			want: ReleaseDiff{
				CRDsAdded: []CRDChange{{Name: "trainjobs.trainer.kubeflow.org", Kind: "TrainJob", GreenServed: []string{"v1alpha1"}, GreenStorage: "v1alpha1"}},
				CRDsRemoved: []CRDChange{
					{Name: "pytorchjobs.kubeflow.org", Kind: "PyTorchJob", BlueServed: []string{"v1"}, BlueStorage: "v1", Note: "green does not serve PyTorchJob: its objects have no place there"},
					{Name: "tfjobs.kubeflow.org", Kind: "TFJob", BlueServed: []string{"v1"}, BlueStorage: "v1", Note: "green does not serve TFJob: its objects have no place there"},
				},
			}},
		{name: "storage version moves, both still served",
			blue:  Release{CRDs: []CRD{crd("gateways.networking.istio.io", "Gateway", "v1beta1", "v1", "v1alpha3", "v1beta1")}},
			green: Release{CRDs: []CRD{crd("gateways.networking.istio.io", "Gateway", "v1", "v1beta1", "v1", "v1alpha3")}},
			want: ReleaseDiff{CRDsChanged: []CRDChange{{Name: "gateways.networking.istio.io", Kind: "Gateway",
				BlueServed: []string{"v1", "v1alpha3", "v1beta1"}, GreenServed: []string{"v1", "v1alpha3", "v1beta1"}, BlueStorage: "v1beta1", GreenStorage: "v1",
				Note: "storage version v1beta1 → v1 (the old one still served)"}}}},
		{name: "served versions change",
			blue:  Release{CRDs: []CRD{crd("a.x", "A", "v1alpha1", "v1alpha1")}},
			green: Release{CRDs: []CRD{crd("a.x", "A", "v1", "v1")}},
			want: ReleaseDiff{CRDsChanged: []CRDChange{{Name: "a.x", Kind: "A", BlueServed: []string{"v1alpha1"}, GreenServed: []string{"v1"}, BlueStorage: "v1alpha1", GreenStorage: "v1",
				Note: "storage version v1alpha1 → v1; no longer served: v1alpha1; newly served: v1; no version served by both"}}}},
		{name: "components and namespaces on one side",
			blue: Release{Namespaces: []string{"kubeflow"}, Components: []Component{
				comp("Deployment", "kubeflow", "training-operator", Container{Name: "op", Image: "to:1"}), comp("DaemonSet", "kube-system", "cni")}},
			green: Release{Namespaces: []string{"kubeflow", "kubeflow-system"}, Components: []Component{
				comp("Deployment", "kubeflow-system", "trainer"), comp("StatefulSet", "kube-system", "cni"), comp("DaemonSet", "kube-system", "cni")}},
			want: ReleaseDiff{NamespacesAdded: []string{"kubeflow-system"},
				ComponentsAdded:   []ComponentRef{{"Deployment", "kubeflow-system", "trainer"}, {"StatefulSet", "kube-system", "cni"}},
				ComponentsRemoved: []ComponentRef{{"Deployment", "kubeflow", "training-operator"}}}},
		{name: "images by container, init containers apart",
			blue: Release{Components: []Component{comp("Deployment", "kubeflow", "mysql",
				Container{Name: "mysql", Image: "gcr.io/ml-pipeline/mysql:8.0.26"}, Container{Name: "sidecar", Image: "s:1"}, Container{Name: "mysql", Image: "busybox:1", Init: true})}},
			green: Release{Components: []Component{comp("Deployment", "kubeflow", "mysql",
				Container{Name: "mysql", Image: "mysql:8.4"}, Container{Name: "sidecar", Image: "s:1"}, Container{Name: "exporter", Image: "e:2"}, Container{Name: "mysql", Image: "busybox:1", Init: true})}},
			want: ReleaseDiff{ImagesChanged: []ImageChange{
				{ComponentRef: ComponentRef{"Deployment", "kubeflow", "mysql"}, Container: "exporter", Green: "e:2"},
				{ComponentRef: ComponentRef{"Deployment", "kubeflow", "mysql"}, Container: "mysql", Blue: "gcr.io/ml-pipeline/mysql:8.0.26", Green: "mysql:8.4"},
			}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CompareReleases(tc.blue, tc.green); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("CompareReleases:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPlatformOfKeepsTheReleaseOnly(t *testing.T) {
	cfg, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSides(cfg.Planning, []Tenant{{Name: "alice", Namespace: "alice"}}, nil)
	r := s.PlatformOf(Release{
		Namespaces: []string{"alice", "kubeflow", "default", "kubeflow-system"},
		CRDs:       []CRD{{Name: "notebooks.kubeflow.org"}},
		Components: []Component{{Kind: "Deployment", Namespace: "alice", Name: "ml-pipeline-ui-artifact"}, {Kind: "Deployment", Namespace: "kubeflow", Name: "mysql"},
			{Kind: "DaemonSet", Namespace: "kube-system", Name: "istio-cni-node"}, {Kind: "Deployment", Namespace: "team-b", Name: "app"}},
	})
	want := Release{Namespaces: []string{"kubeflow", "kubeflow-system"}, CRDs: []CRD{{Name: "notebooks.kubeflow.org"}},
		Components: []Component{{Kind: "Deployment", Namespace: "kubeflow", Name: "mysql"}, {Kind: "DaemonSet", Namespace: "kube-system", Name: "istio-cni-node"}}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("PlatformOf:\n got %+v\nwant %+v", r, want)
	}
}

func TestSideItems(t *testing.T) {
	cfg, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	p := &Plan{Config: cfg.Planning, Resources: []Resource{
		{Version: "v1", Resource: "namespaces", Kind: "Namespace", Count: 3},
		{Version: "v1", Resource: "persistentvolumeclaims", Namespaced: true, Count: 4, Namespaces: map[string]Count{"kubeflow": {Count: 2}, "alice": {Count: 2}}},
		{Version: "v1", Resource: "secrets", Namespaced: true, Count: 3, Namespaces: map[string]Count{"kubeflow": {Count: 3}}},
		{Group: "apps", Version: "v1", Resource: "deployments", Namespaced: true, Count: 3, Namespaces: map[string]Count{"kubeflow": {Count: 3}}},
		{Group: "kubeflow.org", Version: "v1", Resource: "profiles", Count: 1},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles", Count: 7},
	}}
	s := NewSides(cfg.Planning, []Tenant{{Name: "alice", Namespace: "alice"}}, nil)
	named := []NamedObject{
		{Resource: "persistentvolumeclaims", Namespace: "kubeflow", Name: "mysql-pv-claim", Side: State, Why: "holds database kfp-mysql"},
		{Resource: "secrets", Namespace: "kubeflow", Name: "mysql-secret", Side: State, Why: "credentials of database kfp-mysql"},
		{Resource: "persistentvolumeclaims", Namespace: "alice", Name: "ws", Side: State, Why: "already state"},
	}
	moves, left := sideItems(p, s, []string{"alice", "kubeflow", "team-b"}, named)
	wantMoves := []SideItem{
		{Namespace: "alice", Objects: 3, Why: "namespace of tenant alice"},
		{Namespace: "kubeflow", Resource: "persistentvolumeclaims", Name: "mysql-pv-claim", Objects: 1, Why: "holds database kfp-mysql"},
		{Namespace: "kubeflow", Resource: "secrets", Name: "mysql-secret", Objects: 1, Why: "credentials of database kfp-mysql"},
		{Namespace: "team-b", Objects: 1, Why: "not part of the release"},
		{Resource: "profiles.kubeflow.org", Objects: 1, Why: "the tenants"},
	}
	wantLeft := []SideItem{
		{Namespace: "kubeflow", Objects: 1 + 1 + 2 + 3, Why: "namespace of the release"},
		{Resource: "clusterroles.rbac.authorization.k8s.io", Objects: 7, Why: "cluster-scoped, of the release (platform.clusterScoped)"},
	}
	if !reflect.DeepEqual(moves, wantMoves) {
		t.Errorf("moves:\n got %+v\nwant %+v", moves, wantMoves)
	}
	if !reflect.DeepEqual(left, wantLeft) {
		t.Errorf("left to the release:\n got %+v\nwant %+v", left, wantLeft)
	}
	u := &Upgrade{Moves: moves, LeftToRelease: left}
	if u.LeftNamespace("kubeflow") || u.LeftNamespace("alice") || u.LeftNamespace("nope") {
		t.Error("kubeflow has objects that move, alice is state, nope is not in the plan: none is left whole to the release")
	}
	u.LeftToRelease = append(u.LeftToRelease, SideItem{Namespace: "istio-system", Objects: 3})
	if !u.LeftNamespace("istio-system") {
		t.Error("istio-system is left whole to the release")
	}
}

func TestUpgradeFindingsNameEachStrandedObject(t *testing.T) {
	p := &Plan{}
	upgradeFindings(p, &Upgrade{Stranded: []StrandedObject{
		{CRD: "pytorchjobs.kubeflow.org", Kind: "PyTorchJob", Namespace: "alice", Name: "train"},
		{CRD: "tfjobs.kubeflow.org", Kind: "TFJob", Namespace: "bob", Name: "old", LeftBehind: true},
	}})
	if len(p.Findings) != 2 {
		t.Fatalf("findings: %+v", p.Findings)
	}
	block, warn := p.Findings[0], p.Findings[1]
	if block.Severity != Blocking || block.Subject != "PyTorchJob alice/train" || !strings.Contains(block.Message, "--leave-behind pytorchjobs.kubeflow.org") {
		t.Errorf("blocking finding: %+v", block)
	}
	if warn.Severity != Warning || warn.Subject != "TFJob bob/old" || !strings.Contains(warn.Message, "stays on blue") {
		t.Errorf("left-behind finding: %+v", warn)
	}
}

func TestImageChangeNamesItsImages(t *testing.T) {
	c := ImageChange{ComponentRef: ComponentRef{"Deployment", "kubeflow", "mysql"}, Container: "mysql", Blue: "mysql:8.0.26", Green: "mysql:8.4"}
	if got, want := c.String(), "Deployment kubeflow/mysql [mysql]: mysql:8.0.26 → mysql:8.4"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestChooseVersion(t *testing.T) {
	crd := func(storage string, served ...string) CRD {
		return CRD{StorageVersion: storage, ServedVersions: served}
	}
	for _, tc := range []struct {
		name        string
		current     string
		blue, green CRD
		want        string
		ok          bool
	}{
		{"green's storage version, served by blue", "v1beta1", crd("v1beta1", "v1", "v1beta1"), crd("v1", "v1", "v1beta1"), "v1", true},
		{"blue's version when green stores one blue lacks", "v1beta1", crd("v1beta1", "v1beta1"), crd("v2", "v1beta1", "v2"), "v1beta1", true},
		{"green's first one both serve", "v1alpha1", crd("v1alpha1", "v1alpha1", "v1beta1"), crd("v2", "v1beta1", "v2"), "v1beta1", true},
		{"none in common", "v1alpha1", crd("v1alpha1", "v1alpha1"), crd("v1", "v1"), "", false},
		{"green stores a version it does not serve", "v1", crd("v1", "v1", "v2"), crd("v2", "v1"), "v1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why, ok := chooseVersion(tc.current, tc.blue, tc.green)
			if got != tc.want || ok != tc.ok || why == "" {
				t.Errorf("chooseVersion(%s) = %q, %q, %v; want %q, %v", tc.current, got, why, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestPlacement(t *testing.T) {
	cfg, err := config.LoadPreset("kubeflow")
	if err != nil {
		t.Fatal(err)
	}
	if PlacementOf(&Plan{Config: cfg.Planning}) != nil {
		t.Error("a plan without an upgrade section has a placement")
	}
	p := &Plan{Config: cfg.Planning, Tenants: []Tenant{{Name: "alice", Namespace: "alice"}},
		Databases: []DataItem{{Name: "kfp-mysql", Engine: "mysql", Namespace: "kubeflow", Volumes: []string{"mysql-pv-claim"}, Secret: "mysql-secret"}},
		Upgrade:   &Upgrade{LeaveBehind: []string{"pytorchjobs.kubeflow.org"}}}
	pl := PlacementOf(p)
	for _, tc := range []struct {
		gr, namespace, name string
		left, behind, own   bool
	}{
		{"configmaps", "alice", "settings", false, false, false},
		{"profiles.kubeflow.org", "", "alice", false, false, false},
		{"namespaces", "", "alice", false, false, false},
		{"deployments.apps", "kubeflow", "ml-pipeline", true, false, false},
		{"namespaces", "", "kubeflow", true, false, false},
		{"customresourcedefinitions.apiextensions.k8s.io", "", "notebooks.kubeflow.org", true, false, false},
		{"persistentvolumeclaims", "kubeflow", "mysql-pv-claim", false, false, true},
		{"secrets", "kubeflow", "mysql-secret", false, false, true},
		{"secrets", "kubeflow", "other", true, false, false},
		{"pytorchjobs.kubeflow.org", "alice", "train", true, true, false},
	} {
		why, behind := pl.LeftOut(tc.gr, tc.namespace, tc.name)
		if (why != "") != tc.left || behind != tc.behind || pl.GreensOwn(tc.gr, tc.namespace, tc.name) != tc.own {
			t.Errorf("%s %s/%s: left out %q (behind %v), green's own %v; want left %v, behind %v, own %v",
				tc.gr, tc.namespace, tc.name, why, behind, pl.GreensOwn(tc.gr, tc.namespace, tc.name), tc.left, tc.behind, tc.own)
		}
	}
}
