package rules

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// ruleCase is one row of a kind's table: one of its rule's steps applied to an object.
type ruleCase struct {
	name, step, gr string
	in             string // the object, as JSON
	// want is the object after the step, as JSON (normalize, prepare, skipowned); or a part of
	// the reason, "" for none (exclude, skip); "ok" or a part of why it is not (health);
	// "true" or "false" (recreated).
	want string
}

// The mapping the prepare rows use, and what the recreated rows' backup holds.
var (
	testNamespaces = map[string]string{"team-a": "team-b"}
	testClasses    = map[string]string{"gp3": "standard", "": "standard"}
	testClaims     = map[string]bool{"team-a/data": true}
	testHeld       = map[string]bool{"apps/ReplicaSet/team-a/web-1": true}
)

func runCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule, obj := For(tc.gr), decode(t, tc.in)
			var got string
			switch tc.step {
			case "exclude":
				got = rule.ExcludeReason(obj)
			case "skip":
				got = rule.SkipReason(obj, testClaims)
			case "normalize":
				rule.Normalize(obj)
			case "prepare":
				if rule.StorageClasses != nil {
					for _, spec := range rule.StorageClasses(obj) {
						if class, ok := spec["storageClassName"].(string); ok && testClasses[class] != "" {
							spec["storageClassName"] = testClasses[class]
						}
					}
				}
				if rule.Prepare != nil {
					rule.Prepare(obj, func(ns string) string {
						if to, ok := testNamespaces[ns]; ok {
							return to
						}
						return ns
					})
				}
			case "skipowned":
				rule.SkipOwned(obj)
			case "merge": // in: {"want": the backup's prepared object, "live": the target's}
				patch := rule.Merge(asMap(obj["want"]), asMap(obj["live"]))
				g, _ := json.Marshal(patch)
				got = string(g)
			case "health":
				ok, why := rule.Health(obj)
				if got = why; ok {
					got = "ok"
				}
			case "never ready":
				got = fmt.Sprint(rule.NeverReady != nil && rule.NeverReady(obj))
			case "recreated":
				got = "false"
				if rule.IsRecreated(obj, testClaims, func(group, kind, namespace, name string) bool {
					return testHeld[group+"/"+kind+"/"+namespace+"/"+name]
				}) {
					got = "true"
				}
			default:
				t.Fatalf("unknown step %q", tc.step)
			}
			switch tc.step {
			case "normalize", "prepare", "skipowned":
				if want := decode(t, tc.want); !reflect.DeepEqual(obj, want) {
					g, _ := json.Marshal(obj)
					t.Errorf("%s =\n%s\nwant\n%s", tc.step, g, tc.want)
				}
			case "merge":
				if want := decode(t, tc.want); !reflect.DeepEqual(decode(t, got), want) {
					t.Errorf("merge patch =\n%s\nwant\n%s", got, tc.want)
				}
			case "health", "recreated":
				if got != tc.want && (tc.want == "ok" || !strings.Contains(got, tc.want)) {
					t.Errorf("%s = %q, want %q", tc.step, got, tc.want)
				}
			default:
				if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
					t.Errorf("%s reason = %q, want one containing %q", tc.step, got, tc.want)
				}
			}
		})
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any // numbers as the API machinery decodes them (int64)
	if err := utiljson.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return m
}

// TestWaves is the restore order as data: each type's wave, and the rollout history that comes
// before its owners.
func TestWaves(t *testing.T) {
	for gr, want := range map[string]int{
		"customresourcedefinitions.apiextensions.k8s.io": WaveCRDs,
		"namespaces":                                    WaveNamespaces,
		"storageclasses.storage.k8s.io":                 WaveStorage,
		"volumesnapshotclasses.snapshot.storage.k8s.io": WaveStorage,
		"persistentvolumes":                             WaveStorage,
		"persistentvolumeclaims":                        WaveStorage,
		"serviceaccounts":                               WaveConfig,
		"secrets":                                       WaveConfig,
		"configmaps":                                    WaveConfig,
		"limitranges":                                   WaveConfig,
		"resourcequotas":                                WaveQuotas,
		"priorityclasses.scheduling.k8s.io":             WaveConfig,
		"clusterroles.rbac.authorization.k8s.io":        WaveConfig,
		"clusterrolebindings.rbac.authorization.k8s.io": WaveConfig,
		"roles.rbac.authorization.k8s.io":               WaveConfig,
		"rolebindings.rbac.authorization.k8s.io":        WaveConfig,
		"services":                                      WaveRest,
		"pods":                                          WaveRest,
		"deployments.apps":                              WaveRest,
		"replicasets.apps":                              WaveRest,
		"profiles.kubeflow.org":                         WaveRest, // no rule
		"mutatingwebhookconfigurations.admissionregistration.k8s.io":     WaveWebhooks,
		"validatingwebhookconfigurations.admissionregistration.k8s.io":   WaveWebhooks,
		"validatingadmissionpolicies.admissionregistration.k8s.io":       WaveWebhooks,
		"validatingadmissionpolicybindings.admissionregistration.k8s.io": WaveWebhooks,
		"mutatingadmissionpolicies.admissionregistration.k8s.io":         WaveWebhooks,
		"mutatingadmissionpolicybindings.admissionregistration.k8s.io":   WaveWebhooks,
	} {
		if got := For(gr).Wave; got != want {
			t.Errorf("%s: wave %d, want %d", gr, got, want)
		}
	}
	// Only CRDs go first: a rule that forgot its wave would put its type there.
	for _, gr := range Types() {
		if For(gr).Wave == WaveCRDs && gr != "customresourcedefinitions.apiextensions.k8s.io" {
			t.Errorf("%s is in the CRDs' wave", gr)
		}
	}
	var history []string
	for _, gr := range Types() {
		if For(gr).History {
			history = append(history, gr)
		}
	}
	if len(history) != 2 || !For("replicasets.apps").History || !For("controllerrevisions.apps").History {
		t.Errorf("history types %v, want ReplicaSets and ControllerRevisions", history)
	}
	for gr, want := range map[string]RolloutHistory{
		"deployments.apps":  {"Deployment", "replicasets.apps"},
		"daemonsets.apps":   {"DaemonSet", "controllerrevisions.apps"},
		"statefulsets.apps": {"StatefulSet", "controllerrevisions.apps"},
	} {
		if got := For(gr).RolloutHistory; got == nil || *got != want || !For(got.In).History {
			t.Errorf("%s: rollout history %+v, want %+v (a history type)", gr, got, want)
		}
	}
	if len(Waves()) != WaveWebhooks+1 || Waves()[WaveCRDs].WaitFor != "Established" {
		t.Errorf("waves %+v", Waves())
	}
}
