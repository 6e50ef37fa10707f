package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Pods move without their node, priority, debugging sessions and the token volume admission
// added; mirror pods, finished pods and ferry's own mover pods stay; a pod whose controller the
// backup holds is left for that controller to make.
func podRules() map[string]Rule {
	return map[string]Rule{"pods": {
		Wave: WaveRest,
		Exclude: func(obj map[string]any) string {
			if isMover(obj) {
				return moverPod
			}
			if _, mirror := (&unstructured.Unstructured{Object: obj}).GetAnnotations()["kubernetes.io/config.mirror"]; mirror {
				return "mirror pod of a static pod on a source node"
			}
			if phase, _, _ := unstructured.NestedString(obj, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
				return "finished pod (" + phase + ")"
			}
			return ""
		},
		Normalize: func(obj map[string]any) {
			spec := nestedMap(obj, "spec")
			delete(spec, "nodeName")
			delete(spec, "priority")
			// Debugging sessions (kubectl debug), added through the pod's ephemeralcontainers
			// subresource, which a create refuses; they ran on the source's node.
			delete(spec, "ephemeralContainers")
			dropTokenVolumes(spec)
		},
		Skip: func(obj map[string]any) string {
			if isMover(obj) {
				return moverPod
			}
			phase, _, _ := unstructured.NestedString(obj, "status", "phase")
			if phase == "Succeeded" || phase == "Failed" {
				return "the pod has finished (" + phase + ")"
			}
			if _, ok := (&unstructured.Unstructured{Object: obj}).GetAnnotations()["kubernetes.io/config.mirror"]; ok {
				return "a mirror pod: the target's kubelet makes its own"
			}
			return ""
		},
		// A second copy would only be deleted by its controller.
		Recreated: func(obj map[string]any, _ map[string]bool, holds func(group, kind, namespace, name string) bool) bool {
			u := unstructured.Unstructured{Object: obj}
			for _, ref := range u.GetOwnerReferences() {
				if ref.Controller != nil && *ref.Controller {
					gv, _ := schema.ParseGroupVersion(ref.APIVersion)
					return holds(gv.Group, ref.Kind, u.GetNamespace(), ref.Name) || holds(gv.Group, ref.Kind, "", ref.Name)
				}
			}
			return false
		},
	}}
}

// dropTokenVolumes removes the service account token volume that admission adds to every pod
// under a random name (kube-api-access-xxxxx), and its mounts: the target's admission adds its own.
func dropTokenVolumes(spec map[string]any) {
	vols, _ := spec["volumes"].([]any)
	dropped := map[string]bool{}
	kept := vols[:0:0]
	for _, v := range vols {
		name, _ := asMap(v)["name"].(string)
		if strings.HasPrefix(name, "kube-api-access-") && asMap(v)["projected"] != nil {
			dropped[name] = true
			continue
		}
		kept = append(kept, v)
	}
	if len(dropped) == 0 {
		return
	}
	if len(kept) == 0 {
		delete(spec, "volumes")
	} else {
		spec["volumes"] = kept
	}
	for _, list := range []string{"initContainers", "containers", "ephemeralContainers"} {
		containers, _ := spec[list].([]any)
		for _, c := range containers {
			cm := asMap(c)
			mounts, _ := cm["volumeMounts"].([]any)
			keptMounts := mounts[:0:0]
			for _, m := range mounts {
				if name, _ := asMap(m)["name"].(string); !dropped[name] {
					keptMounts = append(keptMounts, m)
				}
			}
			if len(keptMounts) == 0 {
				delete(cm, "volumeMounts")
			} else {
				cm["volumeMounts"] = keptMounts
			}
		}
	}
}

// MoverLabel, of value MoverName, marks ferry's own mover pods.
const (
	MoverLabel = "app.kubernetes.io/name"
	MoverName  = "ferry-mover"
)

// moverPod is why a mover pod never moves: a backup taken while one runs (a copy of volumes at the
// same time, or one being removed) would otherwise make it again on the target, holding its claim.
const moverPod = "ferry's own mover pod, made for one copy of a volume and removed after it"

func isMover(obj map[string]any) bool {
	return (&unstructured.Unstructured{Object: obj}).GetLabels()[MoverLabel] == MoverName
}
