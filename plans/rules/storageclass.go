package rules

// Storage and snapshot classes come with the storage, before the claims that name them.
func storageClassRules() map[string]Rule {
	return same(Rule{Wave: WaveStorage}, "storageclasses.storage.k8s.io", "volumesnapshotclasses.snapshot.storage.k8s.io")
}
