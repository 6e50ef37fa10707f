package rules

// RuntimeClasses come with identity and configuration, before the pods that name them. A class's
// handler (the container runtime's, as gVisor's or Kata's) is fixed once made: one of another
// handler is made again (Remake); pods name it by name, and those that run keep the runtime they
// started with.
func runtimeClassRules() map[string]Rule {
	return map[string]Rule{"runtimeclasses.node.k8s.io": {
		Wave:   WaveConfig,
		Remake: remade,
	}}
}
