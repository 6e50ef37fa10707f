package volumes

import (
	"encoding/json"

	"github.com/ferrykube/ferry/snapshot"
)

// The types below embed snapshot.File, whose JSON methods would otherwise stand for theirs and
// drop their own fields; names go through JSON as snapshot.Name has them, byte for byte.

// withField appends a field to the JSON object b.
func withField(b []byte, key string, v any) ([]byte, error) {
	val, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	k, _ := json.Marshal(key)
	out := append(b[:len(b)-1:len(b)-1], ',')
	out = append(append(append(out, k...), ':'), val...)
	return append(out, '}'), nil
}

// MarshalJSON writes the entry as snapshot.File does, with "staged".
func (f StagedFile) MarshalJSON() ([]byte, error) {
	b, err := f.File.MarshalJSON()
	if err != nil || f.Staged == "" {
		return b, err
	}
	return withField(b, "staged", f.Staged)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *StagedFile) UnmarshalJSON(b []byte) error {
	var rest struct {
		Staged string `json:"staged"`
	}
	if err := json.Unmarshal(b, &rest); err != nil {
		return err
	}
	f.Staged = rest.Staged
	return f.File.UnmarshalJSON(b)
}

// MarshalJSON writes the entry as snapshot.File does, with "action".
func (f UnpackedFile) MarshalJSON() ([]byte, error) {
	b, err := f.File.MarshalJSON()
	if err != nil {
		return b, err
	}
	return withField(b, "action", f.Action)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *UnpackedFile) UnmarshalJSON(b []byte) error {
	var rest struct {
		Action string `json:"action"`
	}
	if err := json.Unmarshal(b, &rest); err != nil {
		return err
	}
	f.Action = rest.Action
	return f.File.UnmarshalJSON(b)
}

type skippedJSON struct {
	Path   snapshot.Name `json:"path"`
	Reason string        `json:"reason"`
}

// MarshalJSON writes the path as snapshot.Name does.
func (s SkippedFile) MarshalJSON() ([]byte, error) {
	return json.Marshal(skippedJSON{snapshot.Name(s.Path), s.Reason})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *SkippedFile) UnmarshalJSON(b []byte) error {
	var j skippedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = SkippedFile{Path: string(j.Path), Reason: j.Reason}
	return nil
}

// file is the entry as the file it is.
func (f StagedFile) file() snapshot.File { return f.File }
