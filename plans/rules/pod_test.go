package rules

import "testing"

func TestPod(t *testing.T) {
	runCases(t, []ruleCase{
		{"mirror pod", "exclude", "pods", `{"metadata":{"namespace":"kube-system","name":"etcd-n1","annotations":{"kubernetes.io/config.mirror":"x"}}}`, "mirror pod"},
		{"finished pod", "exclude", "pods", `{"metadata":{"namespace":"a","name":"p"},"status":{"phase":"Succeeded"}}`, "finished pod"},
		{"running pod", "exclude", "pods", `{"metadata":{"namespace":"a","name":"p"},"status":{"phase":"Running"}}`, ""},
		{"pod node", "normalize", "pods",
			`{"metadata":{"name":"p"},"spec":{"nodeName":"n1","priority":0,"containers":[]}}`,
			`{"metadata":{"name":"p"},"spec":{"containers":[]}}`},
		{"pods lose the token volume admission named", "normalize", "pods",
			`{"metadata":{"name":"p","namespace":"x"},"spec":{"nodeName":"n1","volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"c"}},{"name":"kube-api-access-pr6kg","projected":{"sources":[]}}],"containers":[{"name":"a","volumeMounts":[{"name":"data","mountPath":"/d"},{"name":"kube-api-access-pr6kg","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}]}]}}`,
			`{"metadata":{"name":"p","namespace":"x"},"spec":{"volumes":[{"name":"data","persistentVolumeClaim":{"claimName":"c"}}],"containers":[{"name":"a","volumeMounts":[{"name":"data","mountPath":"/d"}]}]}}`},
		{"a debugging session stays on the source", "normalize", "pods",
			`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"shell"}],"ephemeralContainers":[{"name":"debugger-x7k2p","image":"busybox","targetContainerName":"shell"}]}}`,
			`{"metadata":{"name":"p"},"spec":{"containers":[{"name":"shell"}]}}`},
		{"a volume of that name a user made stays", "normalize", "pods",
			`{"spec":{"volumes":[{"name":"kube-api-access-mine","configMap":{"name":"c"}}],"containers":[{"name":"a","volumeMounts":[{"name":"kube-api-access-mine","mountPath":"/c"}]}]}}`,
			`{"spec":{"volumes":[{"name":"kube-api-access-mine","configMap":{"name":"c"}}],"containers":[{"name":"a","volumeMounts":[{"name":"kube-api-access-mine","mountPath":"/c"}]}]}}`},
		{"a finished pod is skipped", "skip", "pods", `{"status":{"phase":"Failed"}}`, "has finished (Failed)"},
		{"a mirror pod is skipped", "skip", "pods", `{"metadata":{"annotations":{"kubernetes.io/config.mirror":"x"}}}`, "mirror pod"},
		{"a running pod is made", "skip", "pods", `{"status":{"phase":"Running"}}`, ""},
		{"its controller is restored: the controller makes it", "recreated", "pods",
			`{"metadata":{"namespace":"team-a","name":"web-1-abc","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","controller":true}]}}`, "true"},
		{"its controller is not in the backup", "recreated", "pods",
			`{"metadata":{"namespace":"team-a","name":"x-abc","ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"x","controller":true}]}}`, "false"},
		{"a bare pod", "recreated", "pods", `{"metadata":{"namespace":"team-a","name":"p"}}`, "false"},
	})
}

// TestMoverPodsStay: ferry's own mover pods, which a backup taken while one runs would hold, never
// move, from ferry's backups (exclude) nor from Velero's (skip).
func TestMoverPodsStay(t *testing.T) {
	mover := `{"metadata":{"namespace":"a","name":"ferry-mover-x7k2q","labels":{"app.kubernetes.io/name":"ferry-mover"}},"status":{"phase":"Running"}}`
	runCases(t, []ruleCase{
		{"excluded", "exclude", "pods", mover, "mover pod"},
		{"skipped", "skip", "pods", mover, "mover pod"},
		{"another app's pod moves", "exclude", "pods", `{"metadata":{"namespace":"a","name":"web","labels":{"app.kubernetes.io/name":"web"}},"status":{"phase":"Running"}}`, ""},
	})
}
