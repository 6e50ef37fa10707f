package rules

import (
	"maps"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ServiceAccounts come with identity and configuration; references to token Secrets go (the
// target makes those for its own accounts). A namespace's default account is made by the
// target's controller manager: it moves only when someone gave it settings of its own (pull
// secrets, annotations such as a workload identity, labels, token mounting), which a restore then
// merges into the target's.
func serviceAccountRules() map[string]Rule {
	return map[string]Rule{"serviceaccounts": {
		Wave: WaveConfig,
		Exclude: func(obj map[string]any) string {
			if isDefaultAccount(obj) && len(accountSettings(obj)) == 0 {
				return "the target's controller manager creates it in every namespace"
			}
			return ""
		},
		Prepare: func(obj map[string]any, _ func(string) string) {
			secrets, ok := obj["secrets"].([]any)
			if !ok {
				return
			}
			name := (&unstructured.Unstructured{Object: obj}).GetName()
			kept := secrets[:0]
			for _, s := range secrets {
				if !isTokenRef(name, s) {
					kept = append(kept, s)
				}
			}
			if len(kept) == 0 {
				delete(obj, "secrets")
			} else {
				obj["secrets"] = kept
			}
		},
		Merge: func(want, live map[string]any) map[string]any {
			if !isDefaultAccount(want) {
				return nil
			}
			patch := metadataAdded(want, live)
			for _, field := range []string{"imagePullSecrets", "secrets"} {
				if union, grew := unionByName(live[field], want[field]); grew {
					patch[field] = union
				}
			}
			if v, ok := want["automountServiceAccountToken"]; ok && !reflect.DeepEqual(live["automountServiceAccountToken"], v) {
				patch["automountServiceAccountToken"] = v
			}
			if len(patch) == 0 {
				return nil
			}
			return patch
		},
	}}
}

func isDefaultAccount(obj map[string]any) bool {
	return (&unstructured.Unstructured{Object: obj}).GetName() == "default"
}

// accountSettings are the settings someone gave a service account beyond what its controller
// made: labels, annotations, pull secrets, secrets other than its tokens, token mounting.
func accountSettings(obj map[string]any) []string {
	u := unstructured.Unstructured{Object: obj}
	var set []string
	if len(u.GetLabels()) > 0 {
		set = append(set, "labels")
	}
	if len(u.GetAnnotations()) > 0 {
		set = append(set, "annotations")
	}
	if pull, _ := obj["imagePullSecrets"].([]any); len(pull) > 0 {
		set = append(set, "imagePullSecrets")
	}
	if _, ok := obj["automountServiceAccountToken"]; ok {
		set = append(set, "automountServiceAccountToken")
	}
	secrets, _ := obj["secrets"].([]any)
	for _, s := range secrets {
		if !isTokenRef(u.GetName(), s) {
			set = append(set, "secrets")
			break
		}
	}
	return set
}

// isTokenRef says whether an entry of a service account's secrets names one of the token Secrets
// its cluster made for it by itself (isGeneratedTokenName), which do not move.
func isTokenRef(account string, ref any) bool {
	name, _ := asMap(ref)["name"].(string)
	return isGeneratedTokenName(account, name)
}

// unionByName is have's references followed by those of add it lacks, and whether it grew.
func unionByName(have, add any) ([]any, bool) {
	haveList, _ := have.([]any)
	addList, _ := add.([]any)
	union := append([]any(nil), haveList...)
	seen := map[any]bool{}
	for _, r := range haveList {
		seen[asMap(r)["name"]] = true
	}
	for _, r := range addList {
		if name := asMap(r)["name"]; !seen[name] {
			seen[name] = true
			union = append(union, maps.Clone(asMap(r)))
		}
	}
	return union, len(union) > len(haveList)
}
