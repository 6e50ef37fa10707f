// Package storage is where backups live: a small streaming Backend interface with a local folder
// backend (file://) and an S3 backend (s3://) for AWS and S3-compatible servers such as MinIO.
//
// Keys are slash-separated relative paths ("backups/b1/ferry-manifest.json"). Data moves as
// streams of unknown size; nothing is staged whole in memory or on local disk.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
)

// DefaultURL is where backups go when the user names no storage.
const DefaultURL = "file://./ferry-backups"

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Reader reads objects.
type Reader interface {
	// Get opens the object for reading. A missing key gives an error matching ErrNotExist.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes the object. A missing key gives an error matching ErrNotExist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
}

// Lister lists objects.
type Lister interface {
	// List calls fn for every object whose key starts with prefix, in lexical key order.
	// It stops at the first error fn returns and returns it.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}

// Backend is a place that stores backups.
type Backend interface {
	Reader
	Lister
	// Put stores everything read from r under key, replacing an existing object. Readers never see a
	// partly written object: it appears whole when Put returns nil, or not at all.
	Put(ctx context.Context, key string, r io.Reader) error
	// Create stores r under key only if no object has that key; otherwise it returns an error
	// matching ErrExists and leaves the existing object as it was. Of several concurrent Creates
	// of one key exactly one succeeds. Meant for commit markers and journal records.
	Create(ctx context.Context, key string, r io.Reader) error
	// Delete removes the object. Deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// String names the backend's location for messages, without credentials.
	String() string
}

// PartialCleaner is a backend that can remove what interrupted writes left under a prefix: the
// temporary files of a killed Put, the unfinished multipart uploads of S3. They are never listed,
// so only this finds them.
type PartialCleaner interface {
	// CleanPartial removes every unfinished write under prefix and reports how many.
	CleanPartial(ctx context.Context, prefix string) (int, error)
}

// Swapper is a backend that replaces a small record only while it is still the version the caller
// read: a compare-and-swap, for records that several processes contend for (a run's lease). S3 does
// it with If-Match and If-None-Match; file storage under a lock of the record's folder.
type Swapper interface {
	// ReadVersion returns the record's content and its version. A missing key gives an error
	// matching ErrNotExist; a record larger than MaxSwapSize is an error.
	ReadVersion(ctx context.Context, key string) ([]byte, string, error)
	// Swap stores data under key only if the object is still at version ("" means: only if there
	// is no object), and returns the new version. Otherwise it returns an error matching
	// ErrChanged and the object stays as it was. Of several Swaps from one version exactly one
	// succeeds.
	Swap(ctx context.Context, key, version string, data []byte) (string, error)
}

// Copier is a backend that copies a stored object to another key without the bytes passing through
// ferry: S3's CopyObject, a hard link in file storage. The copy is whole when Copy returns nil, and
// a later Put or Delete of either key leaves the other as it was (file storage never writes a file
// in place). In file storage both keys are the same file on disk: damage to the disk's copy
// damages both.
type Copier interface {
	// Copy stores the object at src, of size bytes, under dst as well, replacing an object dst
	// has. A missing src gives an error matching ErrNotExist. The size chooses how the backend
	// copies (S3 copies large objects in parts); a wrong one may fail the copy, never change it.
	Copy(ctx context.Context, src, dst string, size int64) error
}

// MaxSwapSize bounds the records a Swapper reads whole.
const MaxSwapSize = 1 << 20

// ErrChanged matches errors of Swap when the object is no longer at the version given.
var ErrChanged = errors.New("object changed since it was read")

// ErrNotExist matches errors about a key that has no object.
var ErrNotExist = errors.New("object does not exist")

// ErrExists matches errors of Create when the key already has an object.
var ErrExists = errors.New("object already exists")

// NotExistError reports a missing object. It matches ErrNotExist with errors.Is.
type NotExistError struct {
	Location string
	Key      string
}

func (e *NotExistError) Error() string {
	return fmt.Sprintf("%s: %s: %v", e.Location, e.Key, ErrNotExist)
}

func (e *NotExistError) Is(target error) bool { return target == ErrNotExist }

// Open returns the backend a storage URL names:
//
//	file://PATH (or a plain path)    a local folder
//	s3://BUCKET[/PREFIX]?endpoint=URL&region=R&path-style=true&insecure-skip-verify=true&profile=P&part-size=64MiB
//
// A malformed or unknown URL gives a bad-input error naming what is wrong.
func Open(ctx context.Context, rawURL string) (Backend, error) {
	dir, s3cfg, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if s3cfg != nil {
		return NewS3(ctx, *s3cfg)
	}
	return NewFile(dir)
}

// CheckURL checks a storage URL as Open does, without reaching the storage: for a URL that
// others will use (a schedule's job).
func CheckURL(rawURL string) error {
	_, _, err := parseURL(rawURL)
	return err
}

// parseURL reads a storage URL: a folder, or an S3 configuration. Its errors never show the
// URL's credentials (they are refused, and the refusal must not print them into every log).
func parseURL(rawURL string) (string, *S3Config, error) {
	if rawURL == "" {
		rawURL = DefaultURL
	}
	scheme, rest, found := strings.Cut(rawURL, "://")
	if !found {
		// A plain path; but "s3:bucket" or "s3:/bucket" is a mistyped URL, not a folder to create.
		if first, _, _ := strings.Cut(rawURL, "/"); strings.Contains(first, ":") {
			return "", nil, badinput.Errorf("storage URL %q: want file://PATH, s3://BUCKET/PREFIX or a folder path", redactURL(rawURL))
		}
		return rawURL, nil, nil
	}
	switch scheme {
	case "file":
		if rest == "" {
			return "", nil, badinput.Errorf("storage URL %q: no folder after file://", rawURL)
		}
		return rest, nil, nil
	case "s3":
		u, err := url.Parse(rawURL)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // url.Error quotes the whole URL
			}
			return "", nil, badinput.Errorf("storage URL %q: %v", redactURL(rawURL), err)
		}
		// The S3 client never uses an endpoint's user information, and everything that names the
		// backend would show it.
		if strings.Contains(u.Query().Get("endpoint"), "@") {
			return "", nil, badinput.Errorf("storage URL %q: endpoint=: credentials do not belong in the URL: use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or an AWS profile", redactURL(rawURL))
		}
		cfg, err := parseS3URL(u)
		if err != nil {
			return "", nil, badinput.Errorf("storage URL %q: %w", redactURL(rawURL), err)
		}
		return "", &cfg, nil
	default:
		return "", nil, badinput.Errorf("storage URL %q: unknown scheme %q (want file:// or s3://)", redactURL(rawURL), scheme)
	}
}

// redactURL is a storage URL as an error may show it: the user information of the URL and of its
// endpoint replaced by "REDACTED".
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Unreadable: everything between the scheme and an @ may be credentials.
		scheme, rest, found := strings.Cut(rawURL, "://")
		if i := strings.LastIndex(rest, "@"); found && i >= 0 {
			return scheme + "://REDACTED" + rest[i:]
		}
		return rawURL
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if i := strings.LastIndex(u.Opaque, "@"); i >= 0 {
		u.Opaque = "REDACTED" + u.Opaque[i:]
	}
	params := strings.Split(u.RawQuery, "&")
	for i, p := range params {
		k, v, _ := strings.Cut(p, "=")
		if ep, err := url.QueryUnescape(v); k == "endpoint" && (err != nil || strings.Contains(ep, "@")) {
			scheme, rest, found := strings.Cut(ep, "://")
			if !found {
				scheme, rest = "", ep
			} else {
				scheme += "://"
			}
			params[i] = k + "=" + scheme + "REDACTED" + rest[max(strings.LastIndex(rest, "@"), 0):]
		}
	}
	u.RawQuery = strings.Join(params, "&")
	return u.String()
}

// checkKey rejects keys that could escape the backend's root or name nothing.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case strings.HasPrefix(key, "/"), strings.HasSuffix(key, "/"), strings.Contains(key, "\\"):
		return fmt.Errorf("key %q: must be a relative slash-separated path", key)
	case path.Clean(key) != key, key == ".", strings.HasPrefix(key, "../"), key == "..":
		return fmt.Errorf("key %q: must be a clean path without . or .. elements", key)
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, tempPrefix) {
			return fmt.Errorf("key %q: names starting with %q are reserved", key, tempPrefix)
		}
	}
	return nil
}

// checkPrefix accepts "" and any prefix of a valid key.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.HasPrefix(prefix, "/") || strings.Contains(prefix, "\\") || strings.Contains(prefix, "..") {
		return fmt.Errorf("prefix %q: must be the start of a relative slash-separated path", prefix)
	}
	return nil
}

// contextReader stops a copy when its context ends.
type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
