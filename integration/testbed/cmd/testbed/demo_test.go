package main

import "testing"

func TestShellJoin(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "--from", "blue"}, "migrate --from blue"},
		{[]string{"--storage", "s3://ferry/demo?endpoint=http://127.0.0.1:9000&path-style=true"}, "--storage 's3://ferry/demo?endpoint=http://127.0.0.1:9000&path-style=true'"},
		{[]string{"it's", ""}, `'it'\''s' ''`},
	} {
		if got := shellJoin(tc.args); got != tc.want {
			t.Errorf("shellJoin(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}
