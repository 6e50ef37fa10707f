package rules

import "testing"

func TestVolume(t *testing.T) {
	runCases(t, []ruleCase{
		{"volume binding", "normalize", "persistentvolumes",
			`{"metadata":{"name":"pv","annotations":{"pv.kubernetes.io/bound-by-controller":"yes"}},"spec":{"claimRef":{"namespace":"team-a","name":"p","uid":"u","resourceVersion":"1"}}}`,
			`{"metadata":{"name":"pv"},"spec":{"claimRef":{"namespace":"team-a","name":"p"}}}`},
		{"volume class and claimRef follow", "prepare", "persistentvolumes",
			`{"metadata":{"name":"pv"},"spec":{"storageClassName":"gp3","claimRef":{"namespace":"team-a","name":"p"}}}`,
			`{"metadata":{"name":"pv"},"spec":{"storageClassName":"standard","claimRef":{"namespace":"team-b","name":"p"}}}`},
		{"bound to a restored claim: provisioned anew", "recreated", "persistentvolumes", `{"spec":{"claimRef":{"namespace":"team-a","name":"data"}}}`, "true"},
		// One bound to a claim the backup does not hold is the target's to make too (a pod's
		// ephemeral volume: the pod makes its claim there), unless the source released it.
		{"bound to another claim", "recreated", "persistentvolumes", `{"spec":{"claimRef":{"namespace":"team-a","name":"other"}},"status":{"phase":"Bound"}}`, "true"},
		{"released, its claim not in the backup", "recreated", "persistentvolumes", `{"spec":{"claimRef":{"namespace":"team-a","name":"gone"}},"status":{"phase":"Released"}}`, "false"},
		{"unbound", "recreated", "persistentvolumes", `{"spec":{}}`, "false"},
		// A volume the source released when its claim was deleted would give the source's
		// storage to the target's next claim of that name.
		{"released: its claim not in the backup", "skip", "persistentvolumes", `{"spec":{"claimRef":{"namespace":"team-a","name":"gone"}},"status":{"phase":"Released"}}`,
			"released by the source: bound to claim team-a/gone, which the backup does not hold"},
		{"released, a claim of its name restored: provisioned anew", "skip", "persistentvolumes", `{"spec":{"claimRef":{"namespace":"team-a","name":"data"}},"status":{"phase":"Released"}}`, ""},
		{"bound to a claim not in the backup: no skip", "skip", "persistentvolumes", `{"spec":{"claimRef":{"namespace":"team-a","name":"other"}},"status":{"phase":"Bound"}}`, ""},
		{"unbound: restored", "skip", "persistentvolumes", `{"spec":{"nfs":{"server":"files","path":"/share"}}}`, ""},
	})
}

func TestVolumeOfNoClassKeepsIt(t *testing.T) {
	runCases(t, []ruleCase{
		{"a volume made by hand keeps no class", "prepare", "persistentvolumes",
			`{"metadata":{"name":"nfs-share"},"spec":{"storageClassName":"","nfs":{"server":"files","path":"/share"}}}`,
			`{"metadata":{"name":"nfs-share"},"spec":{"storageClassName":"","nfs":{"server":"files","path":"/share"}}}`},
	})
}
