package config

import (
	"maps"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
)

// The one parser and validator of the namespace and storage class maps: flags and ferry.yaml
// (TestParseConfigErrorsNameTheField) get the same rules.
func TestMaps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pairs   []string
		classes bool
		want    map[string]string
		wantErr string
	}{
		{"none", nil, false, nil, ""},
		{"renames", []string{"a=x", "b=y"}, false, map[string]string{"a": "x", "b": "y"}, ""},
		{"the same twice", []string{"a=x", "a=x"}, false, map[string]string{"a": "x"}, ""},
		{"no equals", []string{"a"}, false, nil, `namespace map "a": want FROM=TO`},
		{"empty target", []string{"a="}, false, nil, `namespace map "a=": want FROM=TO`},
		{"one to two", []string{"a=x", "a=y"}, false, nil, "namespace map: a is mapped to both x and y"},
		{"two namespaces to one", []string{"a=x", "b=x"}, false, nil, "namespace map: a and b are both mapped to x: two namespaces cannot become one"},
		{"not a namespace", []string{"a=X"}, false, nil, `namespace map: "X" is not a namespace name`},
		{"two classes to one", []string{"gp2=standard", "gp3=standard"}, true, map[string]string{"gp2": "standard", "gp3": "standard"}, ""},
		{"class to two", []string{"gp2=a", "gp2=b"}, true, nil, "storage class map: gp2 is mapped to both a and b"},
		{"no class to a class", []string{"=standard"}, true, map[string]string{"": "standard"}, ""},
		{"a class to none", []string{"gp2="}, true, nil, `storage class map "gp2=": want FROM=TO`},
		{"no namespace", []string{"=x"}, false, nil, `namespace map "=x": want FROM=TO`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, check := NamespaceMapName, CheckNamespaceMap
			if tc.classes {
				name, check = StorageClassMapName, CheckStorageClassMap
			}
			m, err := ParseMap(name, tc.pairs)
			if err == nil {
				err = check(m)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("%v: %v", tc.pairs, err)
			case tc.wantErr != "" && (err == nil || !badinput.Is(err) || !strings.HasPrefix(err.Error(), tc.wantErr)):
				t.Fatalf("%v: error %v, want bad input starting %q", tc.pairs, err, tc.wantErr)
			case tc.wantErr == "" && !maps.Equal(m, tc.want):
				t.Fatalf("%v: %v, want %v", tc.pairs, m, tc.want)
			}
		})
	}
}
