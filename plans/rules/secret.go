package rules

import (
	"regexp"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Secrets come with identity and configuration, with keyed digests. A token Secret someone made
// for a service account (a long-lived token for a tool outside the cluster) moves without what
// the source's token controller filled in: the target's fills it with a token it signs, for its
// account of that name, which must exist first (After). The tokens clusters before Kubernetes
// 1.24 made for every account by themselves, and bootstrap tokens, stay.
func secretRules() map[string]Rule {
	return map[string]Rule{"secrets": {
		Wave:   WaveConfig,
		Secret: true,
		After:  []string{"serviceaccounts"},
		Remake: remade,
		Exclude: func(obj map[string]any) string {
			switch {
			case isGeneratedToken(obj):
				return generatedToken
			case secretType(obj) == "bootstrap.kubernetes.io/token":
				return "bootstrap tokens belong to the source cluster"
			}
			return ""
		},
		Capture: dropFilledToken,
		Normalize: func(obj map[string]any) {
			if secretType(obj) != serviceAccountToken {
				return
			}
			dropFilledToken(obj)
			if meta := nestedMap(obj, "metadata"); meta != nil {
				// The API server's record of the token's use on the source.
				deleteLabels(meta, []string{"kubernetes.io/legacy-token-last-used", "kubernetes.io/legacy-token-invalid-since"})
			}
		},
		Skip: func(obj map[string]any) string {
			if isGeneratedToken(obj) {
				return generatedToken
			}
			return ""
		},
	}}
}

const (
	serviceAccountToken = "kubernetes.io/service-account-token"
	generatedToken      = "a token the source cluster made for its service account by itself: the target issues its own"
)

func secretType(obj map[string]any) string {
	t, _, _ := unstructured.NestedString(obj, "type")
	return t
}

// generatedTokenName is the name the token controller of Kubernetes before 1.24 gave the token it
// made for every service account: <account>-token-<5 random characters>.
var generatedTokenName = regexp.MustCompile(`^(.+)-token-[a-z0-9]{5}$`)

// dropFilledToken drops from a service account token Secret what the source's token controller
// filled in: its token, a credential for the source cluster only, which is never stored in a
// backup, and its account's UID (a restore that kept it, Velero's too, would have the target's
// controller delete the Secret, its account's UID being another).
func dropFilledToken(obj map[string]any) {
	if secretType(obj) != serviceAccountToken {
		return
	}
	if data := nestedMap(obj, "data"); data != nil {
		for _, key := range []string{"token", "ca.crt", "namespace"} {
			delete(data, key)
		}
		if len(data) == 0 {
			delete(obj, "data")
		}
	}
	if meta := nestedMap(obj, "metadata"); meta != nil {
		deleteAnnotations(meta, []string{"kubernetes.io/service-account.uid"})
	}
}

// isGeneratedToken says whether a Secret is a service account token the source cluster made by
// itself (before Kubernetes 1.24), not one someone asked for: named as the controller named them,
// after the account it is for.
func isGeneratedToken(obj map[string]any) bool {
	if secretType(obj) != serviceAccountToken {
		return false
	}
	u := unstructured.Unstructured{Object: obj}
	return isGeneratedTokenName(u.GetAnnotations()["kubernetes.io/service-account.name"], u.GetName())
}

// isGeneratedTokenName says whether a Secret's name is one the token controller before 1.24 gave
// the token it made for account: <account>-token-<5 random characters>, the account's name cut
// to 51 characters (the controller keeps the name within 63).
func isGeneratedTokenName(account, name string) bool {
	m := generatedTokenName.FindStringSubmatch(name)
	if m == nil || account == "" {
		return false
	}
	if len(account) > maxGeneratedPrefix {
		account = account[:maxGeneratedPrefix]
	}
	return m[1] == account
}

// maxGeneratedPrefix is how much of an account's name the token controller kept in a token's name.
const maxGeneratedPrefix = 51
