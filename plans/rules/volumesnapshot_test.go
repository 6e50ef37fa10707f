package rules

import "testing"

func TestVolumeSnapshot(t *testing.T) {
	runCases(t, []ruleCase{
		{"a snapshot content is never created on the target", "skip", "volumesnapshotcontents.snapshot.storage.k8s.io",
			`{"metadata":{"name":"snapcontent-1"},"spec":{"deletionPolicy":"Delete","source":{"snapshotHandle":"snap-0abc"}}}`, "the target's snapshot controller would own it"},
		{"nor a snapshot", "skip", "volumesnapshots.snapshot.storage.k8s.io",
			`{"metadata":{"name":"nightly","namespace":"team-a"},"spec":{"source":{"persistentVolumeClaimName":"data"}}}`, "before ferry filled it"},
	})
}
