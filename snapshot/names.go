package snapshot

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"
	"unicode/utf8"
)

// Name is a file name as the filesystem has it: bytes, not necessarily UTF-8. JSON strings hold
// only UTF-8 (encoding/json writes any other byte as U+FFFD), so a name that is not valid UTF-8
// is written as {"base64": "<the bytes, standard base64>"}; any other name as a plain string. A
// reader that expects a string refuses the object rather than misread the name.
type Name string

type name64 struct {
	Base64 *string `json:"base64"`
}

// MarshalJSON writes n as a string when it is UTF-8, else as {"base64": ...}.
func (n Name) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(n)) {
		return json.Marshal(string(n))
	}
	s := base64.StdEncoding.EncodeToString([]byte(n))
	return json.Marshal(name64{Base64: &s})
}

// UnmarshalJSON reads either form MarshalJSON writes.
func (n *Name) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*n = Name(s)
		return nil
	}
	var o name64
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil || o.Base64 == nil {
		return errors.New(`a name is a string or {"base64": "..."}`)
	}
	raw, err := base64.StdEncoding.DecodeString(*o.Base64)
	if err != nil {
		return errors.New(`a name's "base64" is not standard base64`)
	}
	*n = Name(raw)
	return nil
}

// fileJSON is File as JSON has it, its names as Names.
type fileJSON struct {
	Path     Name              `json:"path"`
	Type     string            `json:"type"`
	Mode     string            `json:"mode"`
	UID      int               `json:"uid"`
	GID      int               `json:"gid"`
	Size     int64             `json:"size,omitempty"`
	ModTime  time.Time         `json:"modTime"`
	Link     Name              `json:"link,omitempty"`
	Hardlink Name              `json:"hardlink,omitempty"`
	SHA256   string            `json:"sha256,omitempty"`
	Xattrs   map[string]string `json:"xattrs,omitempty"`
}

// MarshalJSON writes the file's names as Names do: byte for byte, whatever they hold.
func (f File) MarshalJSON() ([]byte, error) {
	return json.Marshal(fileJSON{Path: Name(f.Path), Type: f.Type, Mode: f.Mode, UID: f.UID, GID: f.GID, Size: f.Size,
		ModTime: f.ModTime, Link: Name(f.Link), Hardlink: Name(f.Hardlink), SHA256: f.SHA256, Xattrs: f.Xattrs})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (f *File) UnmarshalJSON(b []byte) error {
	var j fileJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = File{Path: string(j.Path), Type: j.Type, Mode: j.Mode, UID: j.UID, GID: j.GID, Size: j.Size,
		ModTime: j.ModTime, Link: string(j.Link), Hardlink: string(j.Hardlink), SHA256: j.SHA256, Xattrs: j.Xattrs}
	return nil
}
