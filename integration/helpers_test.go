package integration

import "regexp"

// regexpLine reports whether some line of text matches pattern.
func regexpLine(text, pattern string) bool {
	return regexp.MustCompile(`(?m)^` + pattern).MatchString(text)
}
