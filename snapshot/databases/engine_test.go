package databases

import (
	"strings"
	"testing"
)

func TestEngineFor(t *testing.T) {
	for _, tc := range []struct {
		name        string
		want        engine
		defaultUser string
		err         string
	}{
		{name: "mysql", want: mysql{}, defaultUser: "root"},
		{name: "postgresql", want: postgres{}, defaultUser: "postgres"},
		// Only the names ferry.yaml and the manifest use: MariaDB is "mysql".
		{name: "mariadb", err: `engine "mariadb": want mysql or postgresql`},
		{name: "PostgreSQL", err: `engine "PostgreSQL": want mysql or postgresql`},
		{name: "", err: `engine "": want mysql or postgresql`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := engineFor(tc.name)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("engineFor(%q) = %v, %v; want error %q", tc.name, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("engineFor(%q) = %#v, %v; want %#v", tc.name, got, err, tc.want)
			}
			if u := got.defaultUser(); u != tc.defaultUser {
				t.Errorf("default user %q, want %q", u, tc.defaultUser)
			}
		})
	}
}

// TestLoadingStagesMySQLOnly: a PostgreSQL dump is never staged, and the refusal comes before
// anything runs on the server.
func TestLoadingStagesMySQLOnly(t *testing.T) {
	_, err := postgres{}.prepareLoad(t.Context(), Dumps{}, target{}, dumpOf("SELECT 1;"), &checkedDump{}, map[string]string{"a": "b"})
	if err == nil || !strings.Contains(err.Error(), "staging is for MySQL dumps") {
		t.Fatalf("staged PostgreSQL load: %v", err)
	}
}
