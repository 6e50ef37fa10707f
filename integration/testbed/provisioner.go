package testbed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Provisioner is the provisioner of the storage classes whose claims the testbed provisions on
// the clusters Options.Provisioned names (integration/testdata/standard-storageclass.yaml is one).
const Provisioner = "ferry.dev/testbed"

// selectedNode is the annotation the scheduler puts on a claim of a WaitForFirstConsumer class once
// a pod using it has a node: the provisioner's cue.
const selectedNode = "volume.kubernetes.io/selected-node"

// provision acts as a dynamic provisioner until ctx ends: every pending claim of a class whose
// provisioner is Provisioner gets a new hostPath PersistentVolume on a folder of its own under
// dir, pre-bound to it as BindClaim does; a claim of a WaitForFirstConsumer class once the
// scheduler picked a node for a pod using it (a zonal class's volume then bound to that node's
// zone, zoneAffinity). Claims of other classes, or without one, are left
// to the tests (BindClaim). A claim with a data source is provisioned as a CSI provisioner does:
// a clone (the source a claim) once its source is bound, with a copy of its files; any other
// source (a VolumeSnapshot, a populator's object) is beyond this provisioner, and the claim stays
// pending, as it would where the snapshot or the populator is missing.
func (c *Cluster) provision(ctx context.Context, dir string) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(kc, 0)
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	classes := factory.Storage().V1().StorageClasses().Lister()
	var waiting sync.Map // claims told to wait for their data source, by UID
	var busy sync.Map    // claims being provisioned, by UID: one goroutine each
	var handle func(obj any)
	handle = func(obj any) {
		pvc, ok := obj.(*corev1.PersistentVolumeClaim)
		if !ok || pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil ||
			pvc.Spec.StorageClassName == nil {
			return
		}
		class, err := classes.Get(*pvc.Spec.StorageClassName)
		if err != nil || class.Provisioner != Provisioner {
			return
		}
		if class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer && pvc.Annotations[selectedNode] == "" {
			return
		}
		source := claimSource(pvc)
		if source != nil && (source.Kind != "PersistentVolumeClaim" || ptrValue(source.APIGroup) != "") {
			if _, told := waiting.LoadOrStore(pvc.UID, true); !told {
				fmt.Fprintf(os.Stderr, "testbed: provisioner of %s: claim %s/%s waits for its data source %s %s, which it cannot fill\n",
					c.Name, pvc.Namespace, pvc.Name, source.Kind, source.Name)
			}
			return
		}
		if _, taken := busy.LoadOrStore(pvc.UID, true); taken {
			return
		}
		go func() {
			defer busy.Delete(pvc.UID)
			if source != nil {
				from, err := c.cloneSource(ctx, kc, pvc.Namespace, source.Name)
				if err != nil || from == "" {
					// The source is not bound yet: try again, as a provisioner does.
					time.AfterFunc(time.Second, func() {
						if latest, ok, _ := claims.GetStore().Get(pvc); ok && ctx.Err() == nil {
							handle(latest)
						}
					})
					return
				}
				if err := c.provisionClaim(ctx, kc, pvc, class, dir, from); err != nil && ctx.Err() == nil {
					fmt.Fprintf(os.Stderr, "testbed: provisioner of %s: %v\n", c.Name, err)
				}
				return
			}
			if err := c.provisionClaim(ctx, kc, pvc, class, dir, ""); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "testbed: provisioner of %s: %v\n", c.Name, err)
			}
		}()
	}
	_, err = claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	if err != nil {
		return err
	}
	// A claim may come before its class.
	_, err = factory.Storage().V1().StorageClasses().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			for _, obj := range claims.GetStore().List() {
				handle(obj)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return nil
}

// claimSource is the claim's data source, as the provisioner reads it (dataSourceRef first), or nil.
func claimSource(pvc *corev1.PersistentVolumeClaim) *corev1.TypedObjectReference {
	if ref := pvc.Spec.DataSourceRef; ref != nil {
		return ref
	}
	if ref := pvc.Spec.DataSource; ref != nil {
		return &corev1.TypedObjectReference{APIGroup: ref.APIGroup, Kind: ref.Kind, Name: ref.Name}
	}
	return nil
}

// cloneSource is the folder of the bound claim a clone copies, or "" while it is not bound.
func (c *Cluster) cloneSource(ctx context.Context, kc kubernetes.Interface, namespace, claim string) (string, error) {
	src, err := kc.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil || src.Status.Phase != corev1.ClaimBound {
		return "", err
	}
	pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, src.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.HostPath == nil {
		return "", err
	}
	return pv.Spec.HostPath.Path, nil
}

// provisionClaim makes the claim's volume, a copy of the folder from when it is a clone; a second
// call for the same claim finds it made.
func (c *Cluster) provisionClaim(ctx context.Context, kc kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass, dir, from string) error {
	affinity, err := zoneAffinity(ctx, kc, pvc, class)
	if err != nil {
		return err
	}
	name := "pvc-" + string(pvc.UID)
	folder := filepath.Join(dir, name)
	if from != "" {
		if _, err := os.Stat(folder); errors.Is(err, fs.ErrNotExist) {
			// Copied aside and renamed, so that a second call never copies into a half-made clone.
			tmp := folder + ".clone"
			os.RemoveAll(tmp)
			if err := os.CopyFS(tmp, os.DirFS(from)); err != nil {
				return fmt.Errorf("clone of %s/%s: %w", pvc.Namespace, pvc.Name, err)
			}
			if err := os.Rename(tmp, folder); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return err
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              *pvc.Spec.StorageClassName,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: folder}},
			NodeAffinity:                  affinity,
		},
	}
	if _, err := kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("persistent volume for %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}

// ZoneLabel is the label of a node's zone, which the volumes of a zonal class are bound to.
const ZoneLabel = "topology.kubernetes.io/zone"

// zoneAffinity is the node affinity of a volume of a zonal class (parameter topology: zone), as a
// zonal disk's CSI provisioner sets it: the zone of the node the scheduler selected for the
// claim's first pod. Other classes' volumes have none.
func zoneAffinity(ctx context.Context, kc kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, class *storagev1.StorageClass) (*corev1.VolumeNodeAffinity, error) {
	if class.Parameters["topology"] != "zone" {
		return nil, nil
	}
	node, err := kc.CoreV1().Nodes().Get(ctx, pvc.Annotations[selectedNode], metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("zone of claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	zone := node.Labels[ZoneLabel]
	if zone == "" {
		return nil, fmt.Errorf("zone of claim %s/%s: node %s has no %s label", pvc.Namespace, pvc.Name, node.Name, ZoneLabel)
	}
	return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: ZoneLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
	}}}}, nil
}
