package buckets

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/ferrykube/ferry/snapshot"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
	"github.com/minio/minio-go/v7/pkg/sse"
	"github.com/minio/minio-go/v7/pkg/tags"
)

// settingsFile is where a backup keeps a bucket's settings.
func settingsFile(bucket string) string { return "bucket-settings/" + bucket + ".json" }

// setting is one of a bucket's settings: how it is read from a store, compared and written.
type setting struct {
	name string
	// read reads the store's setting into s; a store's "there is none" is no error.
	read func(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) error
	has  func(s snapshot.BucketSettings) bool
	// differs says how got's setting differs from want's, or "" when it does not. It names
	// keys, modes and states, never a policy's or a tag's content.
	differs func(want, got snapshot.BucketSettings) string
	// write gives the bucket want's setting (removes it when want has none); got is the bucket's.
	write func(ctx context.Context, mc *minio.Client, bucket string, want, got snapshot.BucketSettings) error
	// beforeObjects says the restore writes it before the objects are put, so that they are
	// kept as the backup's bucket keeps them; the others come after, so that a policy that
	// denies ferry's writes, or a lifecycle rule, does not act on the restore itself.
	beforeObjects bool
	// onlyWhenHad says a target's setting where the backup's bucket had none is no difference,
	// so the target's is read only for a backup that has it: a target that encrypts what the
	// source kept in clear loses nothing, and one that will not say (no permission) need not.
	onlyWhenHad bool
}

// compared are the settings whose target's value a restore or verify of want reads and compares.
func compared(want snapshot.BucketSettings) []setting {
	return slices.DeleteFunc(settings(), func(st setting) bool { return st.onlyWhenHad && !st.has(want) })
}

// settings are a bucket's settings a backup keeps, in the order a restore writes them: object
// lock's retention before versioning (which object lock needs enabled), both before the objects.
func settings() []setting {
	return []setting{
		{name: "object lock", beforeObjects: true, read: readObjectLock, has: func(s snapshot.BucketSettings) bool { return s.ObjectLock != nil },
			differs: func(want, got snapshot.BucketSettings) string {
				switch w, g := want.ObjectLock, got.ObjectLock; {
				case w == nil && g == nil || w != nil && g != nil && *w == *g:
					return ""
				case g == nil:
					return "object lock: the backup's bucket has it, the target's does not"
				case w == nil:
					return "object lock: the target's bucket has it, the backup's did not"
				default:
					return fmt.Sprintf("object lock's default retention: backup %s, target %s", retention(w), retention(g))
				}
			},
			write: func(ctx context.Context, mc *minio.Client, bucket string, want, got snapshot.BucketSettings) error {
				switch {
				case want.ObjectLock == nil:
					return errors.New("a bucket's object lock cannot be turned off")
				case got.ObjectLock == nil:
					return errors.New("only a new bucket can get object lock, and the target's bucket was made without it: make it anew with object lock, then restore")
				case want.ObjectLock.Mode == "":
					return mc.SetObjectLockConfig(ctx, bucket, nil, nil, nil)
				}
				mode, unit := minio.RetentionMode(want.ObjectLock.Mode), minio.ValidityUnit(want.ObjectLock.Unit)
				validity := want.ObjectLock.Validity
				return mc.SetObjectLockConfig(ctx, bucket, &mode, &validity, &unit)
			}},
		{name: "versioning", beforeObjects: true, read: func(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) error {
			v, err := mc.GetBucketVersioning(ctx, bucket)
			s.Versioning = v.Status
			return err
		}, has: func(s snapshot.BucketSettings) bool { return s.Versioning != "" },
			differs: func(want, got snapshot.BucketSettings) string {
				if versioned(want) == versioned(got) {
					return ""
				}
				return fmt.Sprintf("versioning: backup %s, target %s", or(want.Versioning, "off"), or(got.Versioning, "off"))
			},
			write: func(ctx context.Context, mc *minio.Client, bucket string, want, got snapshot.BucketSettings) error {
				status := minio.Enabled
				if !versioned(want) {
					status = minio.Suspended // a bucket that had versioning never goes back to none
				}
				return mc.SetBucketVersioning(ctx, bucket, minio.BucketVersioningConfiguration{Status: status})
			}},
		// Before the objects, so that the store encrypts those put without their own encryption.
		{name: "encryption", beforeObjects: true, onlyWhenHad: true, read: readEncryption, has: func(s snapshot.BucketSettings) bool { return s.Encryption != nil },
			differs: func(want, got snapshot.BucketSettings) string {
				if keepsEncrypted(want.Encryption, got.Encryption) {
					return ""
				}
				return fmt.Sprintf("default encryption: backup %s, target %s", encryptionText(want.Encryption), encryptionText(got.Encryption))
			},
			write: func(ctx context.Context, mc *minio.Client, bucket string, want, _ snapshot.BucketSettings) error {
				return mc.SetBucketEncryption(ctx, bucket, &sse.Configuration{Rules: []sse.Rule{{Apply: sse.ApplySSEByDefault{
					SSEAlgorithm: want.Encryption.Algorithm, KmsMasterKeyID: want.Encryption.KMSKeyID}}}})
			}},
		{name: "policy", read: func(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) (err error) {
			s.Policy, err = mc.GetBucketPolicy(ctx, bucket) // "" when it has none
			return err
		}, has: func(s snapshot.BucketSettings) bool { return s.Policy != "" },
			differs: func(want, got snapshot.BucketSettings) string {
				return presence("policy", want.Policy != "", got.Policy != "", samePolicy(want.Policy, got.Policy))
			},
			write: func(ctx context.Context, mc *minio.Client, bucket string, want, _ snapshot.BucketSettings) error {
				return mc.SetBucketPolicy(ctx, bucket, want.Policy) // "" removes it
			}},
		{name: "lifecycle", read: readLifecycle, has: func(s snapshot.BucketSettings) bool { return s.Lifecycle != "" },
			differs: func(want, got snapshot.BucketSettings) string {
				return presence("lifecycle", want.Lifecycle != "", got.Lifecycle != "", sameLifecycle(want.Lifecycle, got.Lifecycle))
			},
			write: func(ctx context.Context, mc *minio.Client, bucket string, want, _ snapshot.BucketSettings) error {
				config, err := parseLifecycle(want.Lifecycle)
				if err != nil {
					return err
				}
				return mc.SetBucketLifecycle(ctx, bucket, config) // an empty one removes it
			}},
		{name: "tags", read: func(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) error {
			t, err := mc.GetBucketTagging(ctx, bucket)
			if code(err) == "NoSuchTagSet" {
				return nil
			}
			if err == nil {
				s.Tags = t.ToMap()
			}
			return err
		}, has: func(s snapshot.BucketSettings) bool { return len(s.Tags) > 0 },
			differs: func(want, got snapshot.BucketSettings) string {
				keys := differentKeys(want.Tags, got.Tags)
				if len(keys) == 0 {
					return ""
				}
				return fmt.Sprintf("tags: %s differ from the backup's", strings.Join(keys, ", "))
			},
			write: func(ctx context.Context, mc *minio.Client, bucket string, want, _ snapshot.BucketSettings) error {
				if len(want.Tags) == 0 {
					return mc.RemoveBucketTagging(ctx, bucket)
				}
				t, err := tags.NewTags(want.Tags, false)
				if err != nil {
					return err
				}
				return mc.SetBucketTagging(ctx, bucket, t)
			}},
	}
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// versioned says whether new writes to the bucket keep the versions they replace. A bucket whose
// versioning is suspended keeps none, as one that never had it.
func versioned(s snapshot.BucketSettings) bool { return s.Versioning == minio.Enabled }

func retention(l *snapshot.ObjectLock) string {
	if l.Mode == "" {
		return "none"
	}
	return fmt.Sprintf("%s %d %s", l.Mode, l.Validity, l.Unit)
}

// presence describes how a setting whose content is not shown differs.
func presence(name string, want, got, same bool) string {
	switch {
	case want && !got:
		return name + ": set on the backup's bucket, not on the target's"
	case !want && got:
		return name + ": set on the target's bucket, not on the backup's"
	case want && !same:
		return name + ": differs from the backup's"
	}
	return ""
}

// code is an S3 error's code, "" for an error the store did not answer with (a broken
// connection).
func code(err error) string {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		return resp.Code
	}
	return ""
}

func readObjectLock(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) error {
	enabled, mode, validity, unit, err := mc.GetObjectLockConfig(ctx, bucket)
	switch {
	case code(err) == "ObjectLockConfigurationNotFoundError":
		return nil
	case err != nil:
		return err
	case enabled != "Enabled":
		return nil
	}
	s.ObjectLock = &snapshot.ObjectLock{}
	if mode != nil && validity != nil && unit != nil {
		*s.ObjectLock = snapshot.ObjectLock{Mode: string(*mode), Validity: *validity, Unit: string(*unit)}
	}
	return nil
}

// readEncryption reads the bucket's default encryption. A store that has no such setting
// (NotImplemented) encrypts nothing by default.
func readEncryption(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) error {
	config, err := mc.GetBucketEncryption(ctx, bucket)
	var notConfig xml.UnmarshalError // a whole answer of another kind; a cut one is a SyntaxError
	switch c := code(err); {
	case c == "ServerSideEncryptionConfigurationNotFoundError" || c == "NotImplemented":
		return nil
	case errors.As(err, &notConfig):
		return nil // a store that answers with something else (a listing) has no such setting
	case err != nil:
		return err
	case len(config.Rules) == 0 || config.Rules[0].Apply.SSEAlgorithm == "":
		return nil
	}
	apply := config.Rules[0].Apply
	s.Encryption = &snapshot.ServerSideEncryption{Algorithm: apply.SSEAlgorithm, KMSKeyID: apply.KmsMasterKeyID}
	return nil
}

func readLifecycle(ctx context.Context, mc *minio.Client, bucket string, s *snapshot.BucketSettings) error {
	config, err := mc.GetBucketLifecycle(ctx, bucket)
	switch {
	case code(err) == "NoSuchLifecycleConfiguration":
		return nil
	case err != nil:
		return err
	case config.Empty():
		return nil
	}
	data, err := xml.Marshal(config)
	if err != nil {
		return err
	}
	s.Lifecycle = string(data)
	return nil
}

func parseLifecycle(doc string) (*lifecycle.Configuration, error) {
	config := lifecycle.NewConfiguration()
	if doc == "" {
		return config, nil
	}
	if err := xml.Unmarshal([]byte(doc), config); err != nil {
		return nil, errors.New("the lifecycle configuration is not well-formed") // the parser's message may quote it
	}
	return config, nil
}

func sameLifecycle(a, b string) bool {
	ca, errA := parseLifecycle(a)
	cb, errB := parseLifecycle(b)
	if errA != nil || errB != nil {
		return a == b
	}
	// As JSON, which leaves out the XML's element names and namespace (one store's answer has
	// S3's, another's none) and empty elements.
	ja, errA := json.Marshal(ca)
	jb, errB := json.Marshal(cb)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// samePolicy compares two policy documents as JSON values, a list of one value taken for the
// value and lists of strings in any order, as S3 reads them: a store returns a policy laid out
// its own way.
func samePolicy(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return a == b
	}
	return reflect.DeepEqual(canonicalPolicy(va), canonicalPolicy(vb))
}

func canonicalPolicy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if k == "Principal" && e == "*" {
				e = map[string]any{"AWS": "*"} // the same principal: anyone
			}
			out[k] = canonicalPolicy(e)
		}
		return out
	case []any:
		if len(v) == 1 {
			return canonicalPolicy(v[0])
		}
		out := make([]any, len(v))
		strs := make([]string, 0, len(v))
		for i, e := range v {
			out[i] = canonicalPolicy(e)
			if s, ok := e.(string); ok {
				strs = append(strs, s)
			}
		}
		if len(strs) == len(v) {
			slices.Sort(strs)
			for i, s := range strs {
				out[i] = s
			}
		}
		return out
	}
	return v
}

// readSettings reads a bucket's settings from its store, each again while its connection breaks
// off. Those the store refuses to give (no permission, a store without them) are returned in
// unread, by their error code; any other failure is err.
func (c Copies) readSettings(ctx context.Context, mc *minio.Client, bucket string, of []setting) (s snapshot.BucketSettings, unread map[string]string, err error) {
	for _, st := range of {
		e := c.retryBroken(ctx, bucket, "reading its "+st.name, func() error { return st.read(ctx, mc, bucket, &s) })
		switch {
		case ctx.Err() != nil:
			return s, nil, ctx.Err()
		case e != nil && code(e) == "":
			return s, nil, fmt.Errorf("read its %s: %w", st.name, e)
		case e != nil:
			if unread == nil {
				unread = map[string]string{}
			}
			unread[st.name] = code(e)
		}
	}
	return s, unread, nil
}

// storeSettings reads the bucket's settings and writes them into the backup, listing as skipped
// those it may not read and the earlier versions of objects the backup does not hold.
func (c Copies) storeSettings(ctx context.Context, w *snapshot.Writer, mc *minio.Client, entry *snapshot.Bucket) error {
	s, unread, err := c.readSettings(ctx, mc, entry.Name, settings())
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(unread)) {
		s.Unread = append(s.Unread, name)
		w.Skip("bucket", entry.Name+" "+name, fmt.Sprintf("the store does not let the bucket's %s be read (%s): the backup does not hold it, and a restore leaves the target's as it is", name, unread[name]))
	}
	// Only a bucket that keeps versions, or may, is listed a second time, with its versions.
	if _, versioningUnread := unread["versioning"]; s.Versioning != "" || versioningUnread {
		if err := c.storeHistory(ctx, w, mc, entry.Name, s.Versioning); err != nil {
			return err
		}
	}
	file, err := putBucketFile(ctx, w, settingsFile(entry.Name), "the bucket's settings", s)
	entry.Settings = file
	return err
}

// readSettingsFile reads a bucket's settings from the backup, and checks that what a restore
// would send the store is well-formed; nil for a backup that kept none.
func readSettingsFile(ctx context.Context, r *snapshot.Reader, b snapshot.Bucket) (*snapshot.BucketSettings, error) {
	if b.Settings == "" {
		return nil, nil
	}
	var s snapshot.BucketSettings
	if err := readBucketFile(ctx, r, b.Settings, settingsFile(b.Name), "the bucket's settings", &s); err != nil {
		return nil, err
	}
	if s.Policy != "" && !json.Valid([]byte(s.Policy)) {
		return nil, fmt.Errorf("the bucket's settings: its policy is not JSON: %w", snapshot.ErrCorrupt)
	}
	if e := s.Encryption; e != nil && e.Algorithm != sseS3 && !strings.HasPrefix(e.Algorithm, "aws:kms") {
		return nil, fmt.Errorf("the bucket's settings: default encryption %q is not one S3 has: %w", e.Algorithm, snapshot.ErrCorrupt)
	}
	if _, err := parseLifecycle(s.Lifecycle); err != nil {
		return nil, fmt.Errorf("the bucket's settings: %v: %w", err, snapshot.ErrCorrupt)
	}
	return &s, nil
}

// settingsDifferences names how the target's bucket's settings (got) differ from the backup's,
// leaving out those the backup could not read.
func settingsDifferences(want, got snapshot.BucketSettings) []string {
	var out []string
	for _, st := range compared(want) {
		if slices.Contains(want.Unread, st.name) {
			continue
		}
		if d := st.differs(want, got); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// restoreSettings gives the target's bucket the backup's settings of one phase (before or after
// the objects are put): those it differs in, and, with Exact, removes those the backup's bucket
// did not have. What it could not write is listed on the bucket's item, by the store's error code
// only: a store's message may quote the policy or lifecycle it refused.
func (c Copies) restoreSettings(ctx context.Context, mc *minio.Client, bucket string, want snapshot.BucketSettings, beforeObjects bool, report *snapshot.Report) error {
	phase := slices.DeleteFunc(compared(want), func(st setting) bool { return st.beforeObjects != beforeObjects })
	got, unread, err := c.readSettings(ctx, mc, bucket, phase)
	if err != nil {
		return err
	}
	var wrote, failed []string
	for _, st := range phase {
		if slices.Contains(want.Unread, st.name) || st.differs(want, got) == "" || !st.has(want) && !c.Exact {
			continue
		}
		if code, ok := unread[st.name]; ok {
			failed = append(failed, fmt.Sprintf("%s: the target's cannot be read (%s)", st.name, code))
			continue
		}
		err := c.retryBroken(ctx, bucket, "writing its "+st.name, func() error { return st.write(ctx, mc, bucket, want, got) })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed = append(failed, st.name+": "+or(code(err), err.Error()))
			continue
		}
		wrote = append(wrote, st.name)
	}
	if len(wrote) > 0 && c.Log != nil {
		c.Log.Info("the bucket's settings were restored", "bucket", bucket, "settings", strings.Join(wrote, ", "))
	}
	if len(failed) > 0 {
		report.Add(kind, snapshot.StatusFailed, bucket, "its settings were not all restored: "+strings.Join(failed, "; "))
	}
	return nil
}
