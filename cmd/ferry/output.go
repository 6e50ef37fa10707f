package main

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// printStructured writes v as JSON or YAML for -o json|yaml and reports true; for any other
// format (the text for people) it writes nothing and reports false.
func printStructured(out io.Writer, format string, v any) (bool, error) {
	switch format {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return true, err
	case "yaml":
		data, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = out.Write(data)
		return true, err
	}
	return false, nil
}
