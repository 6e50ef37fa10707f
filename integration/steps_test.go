package integration

import "testing"

// step is one step of a long test, run as a subtest of its own so that a failure names it.
type step struct {
	name string
	fn   func(t *testing.T)
}

// runSteps runs the steps in order as subtests. As in one long test function, a step that
// failed with t.Error lets the next ones run, and one that stopped with t.Fatal stops the rest:
// they build on what it did.
func runSteps(t *testing.T, steps ...step) {
	t.Helper()
	for _, s := range steps {
		finished := false
		t.Run(s.name, func(t *testing.T) {
			s.fn(t)
			finished = true // not reached after t.Fatal, t.FailNow or t.SkipNow
		})
		if !finished {
			t.FailNow()
		}
	}
}
