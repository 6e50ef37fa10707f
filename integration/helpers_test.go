package integration

import (
	"regexp"
	"testing"
)

// regexpLine reports whether some line of text matches pattern.
func regexpLine(text, pattern string) bool {
	return regexp.MustCompile(`(?m)^` + pattern).MatchString(text)
}

// dataDir is a folder that lives as long as the package's testbed: claims bound to it stay
// readable for the tests that follow.
func dataDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := tb.DataDir(name)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
