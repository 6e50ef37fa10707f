package testbed

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock records when each test that asked for the testbed began and how long the finished ones
// took, so that a run which reaches go test's -timeout says which tests were still running (go test's
// own list comes first in a panic's long output, where a CI log's tail does not reach) and a failed
// run names its slowest tests.
type testClock struct {
	mu       sync.Mutex
	running  map[string]time.Time
	finished map[string]time.Duration
}

func newTestClock() *testClock {
	return &testClock{running: map[string]time.Time{}, finished: map[string]time.Duration{}}
}

// begin records t's start once (a test may call Require more than once) and its end at cleanup.
func (c *testClock) begin(t testing.TB) {
	name := t.Name()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[name]; ok {
		return
	}
	if _, ok := c.finished[name]; ok {
		return
	}
	c.running[name] = time.Now()
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.finished[name] = time.Since(c.running[name])
		delete(c.running, name)
	})
}

// report writes the tests still running, longest first, then the slowest finished ones.
func (c *testClock) report(w io.Writer, slowest int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	type entry struct {
		name string
		took time.Duration
	}
	sorted := func(m map[string]time.Duration) []entry {
		var out []entry
		for name, took := range m {
			out = append(out, entry{name, took})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].took > out[j].took })
		return out
	}
	running := map[string]time.Duration{}
	for name, began := range c.running {
		running[name] = time.Since(began)
	}
	var lines []string
	for _, e := range sorted(running) {
		lines = append(lines, fmt.Sprintf("testbed: still running %s (for %s)", e.name, e.took.Round(time.Second)))
	}
	done := sorted(c.finished)
	var total time.Duration
	var tests int
	for _, e := range done {
		if !strings.Contains(e.name, "/") { // a subtest's time is in its test's
			total += e.took
			tests++
		}
	}
	lines = append(lines, fmt.Sprintf("testbed: %d tests finished in %s; the slowest, subtests too:", tests, total.Round(time.Second)))
	for i, e := range done {
		if i == slowest {
			break
		}
		lines = append(lines, fmt.Sprintf("testbed:   %-60s %s", e.name, e.took.Round(time.Second)))
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}
