package resources

import (
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// filledClaims are the claims (source namespace/name) whose files the backup holds, with their
// volumes: the volumes' restore fills them, and what would start pods on them waits for it (see
// snapshot.Fill).
func filledClaims(m *snapshot.Manifest) map[string]snapshot.Volume {
	out := map[string]snapshot.Volume{}
	for _, v := range m.Volumes {
		out[v.Namespace+"/"+v.Name] = v
	}
	return out
}

// podSpecPaths are where objects keep the spec of the pods they run: a Pod itself, the workloads
// with a pod template (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs, and custom
// workloads built the same way), and a CronJob's job template.
var podSpecPaths = [][]string{
	{"spec"},
	{"spec", "template", "spec"},
	{"spec", "jobTemplate", "spec", "template", "spec"},
}

// mountsFilledClaim says whether obj (of the backup, in namespace ns of the source) would run pods
// that mount one of claims: a claim named in a pod spec's volumes, or one a StatefulSet's claim
// templates make (<template>-<statefulset>-<ordinal>).
func mountsFilledClaim(obj map[string]any, ns string, claims map[string]bool) bool {
	if len(claims) == 0 || ns == "" {
		return false
	}
	for _, path := range podSpecPaths {
		volumes, _, _ := unstructured.NestedSlice(obj, append(path, "volumes")...)
		for _, v := range volumes {
			name, _, _ := unstructured.NestedString(asMap(v), "persistentVolumeClaim", "claimName")
			if name != "" && claims[ns+"/"+name] {
				return true
			}
		}
	}
	templates, _, _ := unstructured.NestedSlice(obj, "spec", "volumeClaimTemplates")
	owner, _, _ := unstructured.NestedString(obj, "metadata", "name")
	for _, t := range templates {
		name, _, _ := unstructured.NestedString(asMap(t), "metadata", "name")
		if name == "" || owner == "" {
			continue
		}
		prefix := ns + "/" + name + "-" + owner + "-"
		for claim := range claims {
			if ordinal, ok := strings.CutPrefix(claim, prefix); ok {
				if _, err := strconv.Atoi(ordinal); err == nil {
					return true
				}
			}
		}
	}
	return false
}

// waitingOwners are the objects (ownerKey) that wait for the volumes beside what mounts them
// (mountsFilledClaim): the owners of a filled claim or of an object that mounts one, and their
// owners in turn. An operator's resource (a CloudNativePG Cluster, a Prometheus) makes the pods
// that run on the claims it owns, itself or through a StatefulSet it owns: made before the claims
// are filled, its operator would start them on an empty volume (a database would initialize one),
// under the files the restore then writes.
func waitingOwners(a *Archive, claims map[string]bool) (map[string]bool, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	namespaces := map[string]bool{}
	for claim := range claims {
		ns, _, _ := strings.Cut(claim, "/")
		namespaces[ns] = true
	}
	waiting := map[string]bool{}
	var mark func(key string)
	mark = func(key string) {
		for _, owner := range a.ownedBy[key] {
			if !waiting[owner] {
				waiting[owner] = true
				mark(owner)
			}
		}
	}
	for gr, entries := range a.ByResource {
		for _, e := range entries {
			key := e.ownerKey()
			if !namespaces[e.Namespace] || len(a.ownedBy[key]) == 0 {
				continue
			}
			if gr == "persistentvolumeclaims" {
				if claims[e.Namespace+"/"+e.Name] {
					mark(key)
				}
				continue
			}
			obj, err := a.Object(e) // only owned objects of the claims' namespaces are read
			if err != nil {
				return nil, err
			}
			if mountsFilledClaim(obj, e.Namespace, claims) {
				mark(key)
			}
		}
	}
	return waiting, nil
}
