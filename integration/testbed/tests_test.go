package testbed

import (
	"strings"
	"testing"
	"time"
)

func TestClockReport(t *testing.T) {
	c := newTestClock()
	now := time.Now()
	c.running["TestStuck"] = now.Add(-25 * time.Minute)
	c.finished["TestSlow"] = 5 * time.Minute
	c.finished["TestSlow/step"] = 4 * time.Minute
	c.finished["TestQuick"] = time.Second
	var out strings.Builder
	c.report(&out, 2)
	got := out.String()
	for _, want := range []string{
		"testbed: still running TestStuck (for 25m0s)",
		"testbed: 2 tests finished in 5m1s; the slowest, subtests too:",
		"TestSlow ", "TestSlow/step ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "TestQuick") {
		t.Errorf("report lists more than the 2 slowest:\n%s", got)
	}
	if strings.Index(got, "TestSlow ") > strings.Index(got, "TestSlow/step") {
		t.Errorf("report not slowest first:\n%s", got)
	}
}

func TestClockBeginRecordsEachTestOnce(t *testing.T) {
	c := newTestClock()
	t.Run("sub", func(t *testing.T) {
		c.begin(t)
		c.begin(t)
		if len(c.running) != 1 {
			t.Errorf("running %v, want the subtest once", c.running)
		}
	})
	if _, ok := c.finished["TestClockBeginRecordsEachTestOnce/sub"]; !ok || len(c.running) != 0 {
		t.Errorf("after the subtest: running %v, finished %v", c.running, c.finished)
	}
}
