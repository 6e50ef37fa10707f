package volumes

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// TestPrecheckRefusesClaimsThatCannotBind: a claim the target holds but cannot give a volume
// stops the restore before anything is applied, named with the reason; a bound claim, one whose
// class provisions, one a free local volume fits and one the restore makes do not.
func TestPrecheckRefusesClaimsThatCannotBind(t *testing.T) {
	claim := func(name, class, volume string, phase corev1.PersistentVolumeClaimPhase) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class), VolumeName: volume,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
	}
	class := func(name, provisioner string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner}
	}
	local := func(name, size string, ref *corev1.ObjectReference, phase corev1.PersistentVolumePhase) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{StorageClassName: "local",
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}, ClaimRef: ref}, Status: corev1.PersistentVolumeStatus{Phase: phase}}
	}
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		refused string // in the error and the report, "" for none
	}{
		{"the restore makes the claim", nil, ""},
		{"bound", []runtime.Object{claim("data", "gone", "pv-1", corev1.ClaimBound)}, ""},
		{"a class that provisions", []runtime.Object{claim("data", "standard", "", corev1.ClaimPending), class("standard", "csi.example.com")}, ""},
		{"a class the target lacks", []runtime.Object{claim("data", "gp2", "", corev1.ClaimPending)}, "its storage class gp2 does not exist"},
		// Volumes made by hand of a class no StorageClass names ("manual") bind all the same.
		{"no such class, but a free volume of its name", []runtime.Object{claim("data", "local", "", corev1.ClaimPending),
			local("pv-a", "20Gi", nil, corev1.VolumeAvailable)}, ""},
		{"a class the backup brings", []runtime.Object{claim("data", "fast-ssd", "", corev1.ClaimPending)}, ""},
		{"a free local volume", []runtime.Object{claim("data", "local", "", corev1.ClaimPending), class("local", noProvisioner),
			local("pv-a", "20Gi", nil, corev1.VolumeAvailable)}, ""},
		{"local volumes too small, taken, or for another claim", []runtime.Object{claim("data", "local", "", corev1.ClaimPending), class("local", noProvisioner),
			local("pv-a", "5Gi", nil, corev1.VolumeAvailable), local("pv-b", "20Gi", nil, corev1.VolumeBound),
			local("pv-c", "20Gi", &corev1.ObjectReference{Namespace: "team", Name: "other"}, corev1.VolumeAvailable)},
			"its storage class local makes no volumes"},
		{"a local volume kept for it", []runtime.Object{claim("data", "local", "", corev1.ClaimPending), class("local", noProvisioner),
			local("pv-c", "20Gi", &corev1.ObjectReference{Namespace: "team", Name: "data"}, corev1.VolumeAvailable)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Contents{Client: fake.NewSimpleClientset(tc.objects...), Mapping: snapshot.Mapping{Namespaces: map[string]string{"blue-team": "team"}}}
			r := &snapshot.Reader{Manifest: &snapshot.Manifest{Volumes: []snapshot.Volume{{Namespace: "blue-team", Name: "data"}},
				Objects: []snapshot.Object{{Group: "storage.k8s.io", Kind: "StorageClass", Name: "fast-ssd"}}}}
			report := &snapshot.Report{}
			err := c.Precheck(context.Background(), r, report)
			if tc.refused == "" {
				if err != nil || len(report.Items) > 0 {
					t.Fatalf("Precheck = %v, report %+v; want nothing refused", err, report.Items)
				}
				return
			}
			if !errors.Is(err, snapshot.ErrRefused) || !strings.Contains(err.Error(), "team/data ("+tc.refused) {
				t.Fatalf("Precheck = %v; want team/data refused: %s", err, tc.refused)
			}
			if len(report.Items) != 1 || report.Items[0].Status != snapshot.StatusFailed || !strings.Contains(report.Items[0].Detail, tc.refused) {
				t.Errorf("report %+v; want team/data failed: %s", report.Items, tc.refused)
			}
		})
	}
}

// TestPrecheckGoesOnWhenItCannotTell: a claim the target will not let ferry read (a busy API
// server, no permission) is no refusal: the restore goes on, as it did before the check.
func TestPrecheckGoesOnWhenItCannotTell(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
	})
	r := &snapshot.Reader{Manifest: &snapshot.Manifest{Volumes: []snapshot.Volume{{Namespace: "team", Name: "data"}}}}
	report := &snapshot.Report{}
	if err := (Contents{Client: client}).Precheck(context.Background(), r, report); err != nil || len(report.Items) > 0 {
		t.Errorf("Precheck = %v, report %+v; want the restore to go on", err, report.Items)
	}
}

// TestMoverFittedAgainWhenALimitRangeComesBetween: a restore makes a namespace's LimitRange while
// the movers of its claims start; one made between the mover's fitting and its create refuses
// the pod, which is fitted again to it and made.
func TestMoverFittedAgainWhenALimitRangeComesBetween(t *testing.T) {
	client := fake.NewSimpleClientset()
	ranges := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "limits"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypePod, Max: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("384Mi")}}}}}
	refused := false
	client.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if refused {
			return false, nil, nil
		}
		refused = true
		if err := client.Tracker().Add(ranges); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "ferry-mover-x", errors.New("maximum memory usage per Pod is 384Mi, but limit is 512Mi"))
	})
	spec := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "ferry-mover-x"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "mover",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}}}}}}
	pod, err := (Contents{Client: client}).createFitted(context.Background(), spec)
	if err != nil {
		t.Fatalf("createFitted: %v", err)
	}
	if limit := pod.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]; limit.Cmp(resource.MustParse("384Mi")) > 0 {
		t.Errorf("the mover was made with a memory limit of %s, over the range's 384Mi", limit.String())
	}
}
