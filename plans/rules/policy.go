package rules

// LimitRanges and ResourceQuotas come with identity and configuration, before the workloads they
// constrain.
func policyRules() map[string]Rule {
	return same(Rule{Wave: WaveConfig}, "limitranges", "resourcequotas")
}
