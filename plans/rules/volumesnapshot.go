package rules

// VolumeSnapshots and their contents stay in the backup but a restore never creates them: a
// content names a snapshot in the source cluster's storage, which the target's snapshot controller
// would take over, and delete (its policy Delete) once it finds the content's VolumeSnapshot gone
// or another one (the restored one has a new UID), so the source, the way back, would lose it; a
// VolumeSnapshot is bound to such a content, or would have the target snapshot a claim at restore
// time, before ferry filled it. Claims move as files, without their data source (claimRules).
func volumeSnapshotRules() map[string]Rule {
	skip := func(why string) Rule {
		return Rule{Wave: WaveRest, Skip: func(map[string]any) string { return why }}
	}
	content := skip("a snapshot in the source cluster's storage: the target's snapshot controller would own it, and could delete it")
	content.BoundTo = &Binding{Field: "volumeSnapshotRef", What: "a snapshot"}
	return map[string]Rule{
		"volumesnapshotcontents.snapshot.storage.k8s.io": content,
		"volumesnapshots.snapshot.storage.k8s.io":        skip("a snapshot of the source cluster's storage: its content is not restored, and a new one would snapshot the claim before ferry filled it"),
		// Group snapshots (of several claims at once) are the same, by the group.
		"volumegroupsnapshotcontents.groupsnapshot.storage.k8s.io": skip("a group snapshot in the source cluster's storage: the target's snapshot controller would own it, and could delete it"),
		"volumegroupsnapshots.groupsnapshot.storage.k8s.io":        skip("a group snapshot of the source cluster's storage: its content is not restored, and a new one would snapshot the claims before ferry filled them"),
	}
}
