package resources

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestAdmissionPaths(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		live, restored, made string
		wantPaths            []string
		wantReverted         string
	}{{
		name:         "a field the admission changed",
		live:         `{"spec":{"image":"mirror/web","replicas":2}}`,
		restored:     `{"spec":{"image":"web","replicas":2}}`,
		made:         `{"spec":{"image":"mirror/web","replicas":2}}`,
		wantPaths:    []string{"/spec/image"},
		wantReverted: `{"spec":{"image":"web","replicas":2}}`,
	}, {
		name:         "a user's write beside it stays",
		live:         `{"spec":{"image":"mirror/web","replicas":3},"status":{"ready":3}}`,
		restored:     `{"spec":{"image":"web","replicas":2}}`,
		made:         `{"spec":{"image":"mirror/web","replicas":2}}`,
		wantPaths:    []string{"/spec/image"},
		wantReverted: `{"spec":{"image":"web","replicas":3},"status":{"ready":3}}`,
	}, {
		name:         "a user's write over the admission's stays",
		live:         `{"spec":{"image":"web:2"}}`,
		restored:     `{"spec":{"image":"web"}}`,
		made:         `{"spec":{"image":"mirror/web"}}`,
		wantReverted: `{"spec":{"image":"web:2"}}`,
	}, {
		name:         "a field the admission added goes, one it dropped comes back",
		live:         `{"metadata":{"annotations":{"policy/by":"kyverno"}},"spec":{"a":1}}`,
		restored:     `{"metadata":{"annotations":{}},"spec":{"a":1,"b":2}}`,
		made:         `{"metadata":{"annotations":{"policy/by":"kyverno"}},"spec":{"a":1}}`,
		wantPaths:    []string{"/metadata/annotations/policy~1by", "/spec/b"},
		wantReverted: `{"metadata":{"annotations":{}},"spec":{"a":1,"b":2}}`,
	}, {
		name:         "lists of one length by index",
		live:         `{"c":[{"n":"a","i":"m/a"},{"n":"b","i":"x"}]}`,
		restored:     `{"c":[{"n":"a","i":"a"},{"n":"b","i":"b"}]}`,
		made:         `{"c":[{"n":"a","i":"m/a"},{"n":"b","i":"m/b"}]}`,
		wantPaths:    []string{"/c/0/i"},
		wantReverted: `{"c":[{"n":"a","i":"a"},{"n":"b","i":"x"}]}`,
	}, {
		name:         "a list green holds longer is green's",
		live:         `{"c":["m/a","b"]}`,
		restored:     `{"c":["a"]}`,
		made:         `{"c":["m/a"]}`,
		wantReverted: `{"c":["m/a","b"]}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			live, restored, made := decode(t, tc.live), decode(t, tc.restored), decode(t, tc.made)
			paths := admissionPaths(live, restored, made, "")
			if !slices.Equal(paths, tc.wantPaths) {
				t.Errorf("paths %q, want %q", paths, tc.wantPaths)
			}
			if got := revertPaths(live, restored, paths); !sameJSON(got, decode(t, tc.wantReverted)) {
				t.Errorf("reverted %v, want %s", got, tc.wantReverted)
			}
		})
	}
}

// TestCarryBackLeavesGreensAdmission: green's admission gave the restored Deployment a mirror's
// image (its controller rolled out a ReplicaSet of it and numbered it revision 2), and green's
// users then scaled it. Blue gets the replicas, keeps its image and revision, and its ReplicaSets
// are left to blue's controller; replaying the record plans the same.
func TestCarryBackLeavesGreensAdmission(t *testing.T) {
	deployment := func(image string, replicas int, revision string) string {
		return `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"team","annotations":{"deployment.kubernetes.io/revision":"` + revision +
			`"}},"spec":{"replicas":` + string(rune('0'+replicas)) + `,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"` + image + `"}]}}}}`
	}
	replicaSet := func(name, image string, replicas int) string {
		return `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"` + name + `","namespace":"team","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":"u","controller":true}]},` +
			`"spec":{"replicas":` + string(rune('0'+replicas)) + `,"template":{"spec":{"containers":[{"name":"web","image":"` + image + `"}]}}}}`
	}
	original := archiveOf(t, deployment("web:1.4", 2, "1"), replicaSet("web-a", "web:1.4", 2),
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"team"},"data":{"k":"v"}}`)
	carried := archiveOf(t, deployment("mirror/web:1.4", 3, "2"), replicaSet("web-a", "web:1.4", 0), replicaSet("web-b", "mirror/web:1.4", 3),
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"team"},"data":{"k":"v"}}`)
	mirror := func(_ context.Context, _, gr string, restored map[string]any, live *unstructured.Unstructured) ([]string, error) {
		made := runtime.DeepCopyJSON(restored)
		if gr == "deployments.apps" {
			_ = unstructured.SetNestedField(made, "mirror/web:1.4", "spec", "template", "spec", "containers", "0", "image")
			containers, _, _ := unstructured.NestedSlice(made, "spec", "template", "spec", "containers")
			containers[0].(map[string]any)["image"] = "mirror/web:1.4"
			_ = unstructured.SetNestedSlice(made, containers, "spec", "template", "spec", "containers")
			annotations := live.GetAnnotations()
			delete(annotations, deploymentRevision)
			_ = unstructured.SetNestedStringMap(made, annotations, "metadata", "annotations")
		}
		return admittedPaths(gr, live.Object, restored, Normalize(gr, made)), nil
	}
	check := func(t *testing.T, cb *CarryBack) {
		t.Helper()
		if !slices.Equal(cb.Changed, []string{"apps/v1 Deployment team/web"}) || len(cb.Created) != 0 || len(cb.Deleted) != 0 {
			t.Errorf("changed %q, created %q, deleted %q; want the Deployment changed (its replicas) only", cb.Changed, cb.Created, cb.DeletedIDs())
		}
		if d := cb.Differences["apps/v1 Deployment team/web"]; d != "spec.replicas: restored 2, green 3" {
			t.Errorf("the Deployment's difference: %q, want its replicas", d)
		}
		if n := len(cb.Expected.ByResource["replicasets.apps"]); n != 0 {
			t.Errorf("%d ReplicaSets carried; green's rollout to the admission's image is not blue's", n)
		}
		entries := cb.Expected.ByResource["deployments.apps"]
		if len(entries) != 1 {
			t.Fatalf("expected Deployments: %v", entries)
		}
		obj, err := cb.Expected.Object(entries[0])
		if err != nil {
			t.Fatal(err)
		}
		u := unstructured.Unstructured{Object: obj}
		containers, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", "containers")
		replicas, _, _ := unstructured.NestedFieldNoCopy(obj, "spec", "replicas")
		if image := containers[0].(map[string]any)["image"]; image != "web:1.4" || !sameJSON(replicas, 3) || u.GetAnnotations()[deploymentRevision] != "1" {
			t.Errorf("blue's Deployment: image %v, %v replicas, revision %q; want blue's image and revision, green's replicas", image, replicas, u.GetAnnotations()[deploymentRevision])
		}
	}
	cb, err := PlanCarryBack(context.Background(), original, carried, snapshot.Mapping{}, time.Time{}, config.Planning{}, nil, mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	check(t, cb)
	if paths := cb.Admitted["deployments.apps/team/web"]; !slices.Contains(paths, "/spec/template/spec/containers/0/image") || len(cb.Admitted) != 1 {
		t.Errorf("admitted %v, want the Deployment's image", cb.Admitted)
	}
	replayed, err := PlanCarryBack(context.Background(), original, carried, snapshot.Mapping{}, time.Time{}, config.Planning{}, nil, RecordedAdmission(cb.Admitted))
	if err != nil {
		t.Fatal(err)
	}
	defer replayed.Close()
	check(t, replayed)

	// Green's controller kept none of the history before its rollout (revisionHistoryLimit: 0):
	// blue's ReplicaSet is still blue's controller's, not deleted on green.
	pruned := archiveOf(t, deployment("mirror/web:1.4", 3, "2"), replicaSet("web-b", "mirror/web:1.4", 3),
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"team"},"data":{"k":"v"}}`)
	cb, err = PlanCarryBack(context.Background(), original, pruned, snapshot.Mapping{}, time.Time{}, config.Planning{}, nil, mirror)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	check(t, cb)
}

// TestAdmittedPathsLeaveOwners: the dry run is given green's owners, so an owner green's users
// took away (an orphaned ReplicaSet) is theirs, not the admission's.
func TestAdmittedPathsLeaveOwners(t *testing.T) {
	restored := decode(t, `{"metadata":{"name":"web-a","ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","controller":true}]},"spec":{"image":"web"}}`)
	live := decode(t, `{"metadata":{"name":"web-a"},"spec":{"image":"mirror/web"}}`)
	made := decode(t, `{"metadata":{"name":"web-a"},"spec":{"image":"mirror/web"}}`)
	if paths := admittedPaths("replicasets.apps", live, restored, made); !slices.Equal(paths, []string{"/spec/image"}) {
		t.Errorf("admitted %q, want the image only", paths)
	}
}
