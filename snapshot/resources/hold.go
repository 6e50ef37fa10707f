package resources

import (
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// filledClaims are the claims (source namespace/name) whose files the backup holds: the volumes'
// restore fills them, and what would start pods on them waits for it (see snapshot.Fill).
func filledClaims(m *snapshot.Manifest) map[string]bool {
	out := map[string]bool{}
	for _, v := range m.Volumes {
		out[v.Namespace+"/"+v.Name] = true
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
