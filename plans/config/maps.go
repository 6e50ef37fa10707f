package config

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrykube/ferry/internal/badinput"
)

// The names of the two maps in errors; a command line names its flags instead (badinput.Flag).
const (
	NamespaceMapName    = "namespace map"
	StorageClassMapName = "storage class map"
)

// ParseMap reads FROM=TO pairs (as flags give them) into a map for the map named name; a name
// given twice must map to the same name both times. CheckNamespaceMap or CheckStorageClassMap
// then checks the whole map, as for ferry.yaml's.
func ParseMap(name string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, p := range pairs {
		from, to, ok := strings.Cut(p, "=")
		if !ok || to == "" || (from == "" && name != StorageClassMapName) {
			return nil, badinput.Value(name, strconv.Quote(p), "want FROM=TO")
		}
		if prev, dup := out[from]; dup && prev != to {
			return nil, badinput.Value(name, "", "%s is mapped to both %s and %s", from, prev, to)
		}
		out[from] = to
	}
	return out, nil
}

// CheckNamespaceMap checks a namespace map: namespace names, and no two namespaces mapped to one.
// Two namespaces made one would merge their objects, and a carry-back, which maps green's names
// back, could not tell which is whose.
func CheckNamespaceMap(m map[string]string) error {
	if err := checkNames(NamespaceMapName, m, false); err != nil {
		return err
	}
	for _, from := range slices.Sorted(maps.Keys(m)) {
		if !dnsLabel.MatchString(from) {
			return badinput.Value(NamespaceMapName, "", "%q is not a namespace name", from)
		}
		if !dnsLabel.MatchString(m[from]) {
			return badinput.Value(NamespaceMapName, "", "%q is not a namespace name", m[from])
		}
	}
	if a, b, to, ok := manyToOne(m); ok {
		return badinput.Value(NamespaceMapName, "", "%s and %s are both mapped to %s: two namespaces cannot become one (nor be carried back)", a, b, to)
	}
	return nil
}

// CheckStorageClassMap checks a storage class map. Several classes may become one: a carry-back
// then leaves such a class on blue as it was. The empty name maps the claims of no class
// (storageClassName ""), which bind only to volumes made by hand.
func CheckStorageClassMap(m map[string]string) error {
	return checkNames(StorageClassMapName, m, true)
}

func checkNames(name string, m map[string]string, emptyFrom bool) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if (k == "" && !emptyFrom) || m[k] == "" {
			return badinput.Value(name, "", "%q: %q: names must not be empty", k, m[k])
		}
	}
	return nil
}

// manyToOne finds two keys mapped to the same name, the first two in order.
func manyToOne(m map[string]string) (a, b, to string, ok bool) {
	seen := map[string]string{}
	for _, from := range slices.Sorted(maps.Keys(m)) {
		if other, dup := seen[m[from]]; dup {
			return other, from, m[from], true
		}
		seen[m[from]] = from
	}
	return "", "", "", false
}

// reason is what err says of a map's value, without the map's name: ferry.yaml names the field.
func reason(err error) string {
	var ve *badinput.ValueError
	if errors.As(err, &ve) {
		return ve.Reason
	}
	return err.Error()
}
