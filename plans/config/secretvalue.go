package config

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	"github.com/ferrykube/ferry/internal/badinput"
	"go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// SecretValue is a setting of ferry.yaml whose value is secret (a webhook's Authorization
// header). It is given by reference only, valueFrom: {env: NAME} or valueFrom: {secretKeyRef:
// {namespace, name, key}}, and resolved when it is used: what ferry stores (the plan in every
// backup's manifest, a run's journal) is the reference, never the value. A value written in
// place is refused by Validate; ferry does not even keep it.
type SecretValue struct {
	ValueFrom *ValueFrom `yaml:"valueFrom,omitempty" json:"valueFrom,omitempty"`
	// inPlace is set when the document gave a value in place of a reference.
	inPlace bool
}

// ValueFrom is where a secret value comes from: one of an environment variable of ferry's
// process or a key of a Kubernetes Secret on the source cluster.
type ValueFrom struct {
	Env          string        `yaml:"env,omitempty" json:"env,omitempty"`
	SecretKeyRef *SecretKeyRef `yaml:"secretKeyRef,omitempty" json:"secretKeyRef,omitempty"`
}

// SecretKeyRef names a key of a Secret.
type SecretKeyRef struct {
	Namespace string `yaml:"namespace" json:"namespace"`
	Name      string `yaml:"name" json:"name"`
	Key       string `yaml:"key" json:"key"`
}

// Literal makes a SecretValue as a document with a value in place reads: refused by Validate.
func Literal() SecretValue { return SecretValue{inPlace: true} }

// FromEnv makes a SecretValue read from an environment variable.
func FromEnv(name string) SecretValue { return SecretValue{ValueFrom: &ValueFrom{Env: name}} }

// UnmarshalYAML reads a reference, or notes a value in place (without keeping it) for Validate
// to refuse with the field's name.
func (v *SecretValue) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*v = SecretValue{inPlace: true}
		return nil
	}
	if err := strictKeys(n, "valueFrom"); err != nil {
		return err
	}
	type plain SecretValue
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*v = SecretValue(p)
	return nil
}

// UnmarshalYAML reads valueFrom, refusing fields it does not know.
func (f *ValueFrom) UnmarshalYAML(n *yaml.Node) error {
	if err := strictKeys(n, "env", "secretKeyRef"); err != nil {
		return err
	}
	type plain ValueFrom
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*f = ValueFrom(p)
	return nil
}

// UnmarshalYAML reads secretKeyRef, refusing fields it does not know.
func (r *SecretKeyRef) UnmarshalYAML(n *yaml.Node) error {
	if err := strictKeys(n, "namespace", "name", "key"); err != nil {
		return err
	}
	type plain SecretKeyRef
	var p plain
	if err := n.Decode(&p); err != nil {
		return err
	}
	*r = SecretKeyRef(p)
	return nil
}

// strictKeys refuses a mapping's keys other than known (a node's Decode does not, whatever the
// decoder's KnownFields).
func strictKeys(n *yaml.Node, known ...string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		ok := false
		for _, name := range known {
			ok = ok || k.Value == name
		}
		if !ok {
			return fmt.Errorf("line %d: field %s not found (known: %v)", k.Line, k.Value, known)
		}
	}
	return nil
}

// UnmarshalJSON reads a reference. A string is a value in place, as a plan or a run's journal of
// an older ferry holds it: it is not kept, and Validate refuses it.
func (v *SecretValue) UnmarshalJSON(data []byte) error {
	var s string
	if json.Unmarshal(data, &s) == nil {
		*v = SecretValue{inPlace: true}
		return nil
	}
	type plain SecretValue
	var p plain
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	*v = SecretValue(p)
	return nil
}

var (
	envName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	secretKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)
	dnsName   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
)

// validate reports what is wrong with the reference at field through bad.
func (v SecretValue) validate(field string, bad func(field, format string, args ...any)) {
	const how = "valueFrom: {env: NAME} or valueFrom: {secretKeyRef: {namespace: NS, name: SECRET, key: KEY}}"
	switch f := v.ValueFrom; {
	case v.inPlace:
		bad(field, "a value in place would be stored in plaintext in every backup's plan and the run's journal: give it by reference, %s", how)
	case f == nil:
		bad(field, "missing: give it by reference, %s", how)
	case f.Env != "" && f.SecretKeyRef != nil:
		bad(field+".valueFrom", "has both env and secretKeyRef: want one")
	case f.Env == "" && f.SecretKeyRef == nil:
		bad(field+".valueFrom", "needs env or secretKeyRef")
	case f.Env != "":
		if !envName.MatchString(f.Env) {
			bad(field+".valueFrom.env", "%q is not an environment variable's name", f.Env)
		}
	default:
		r := f.SecretKeyRef
		if !dnsLabel.MatchString(r.Namespace) {
			bad(field+".valueFrom.secretKeyRef.namespace", "%q is not a namespace name", r.Namespace)
		}
		if !dnsName.MatchString(r.Name) {
			bad(field+".valueFrom.secretKeyRef.name", "%q is not a Secret's name", r.Name)
		}
		if !secretKey.MatchString(r.Key) {
			bad(field+".valueFrom.secretKeyRef.key", "%q is not a key of a Secret", r.Key)
		}
	}
}

// String names the reference, never a value: for messages.
func (v SecretValue) String() string {
	switch f := v.ValueFrom; {
	case f == nil:
		return "no reference"
	case f.Env != "":
		return "environment variable " + f.Env
	case f.SecretKeyRef != nil:
		return fmt.Sprintf("key %s of Secret %s/%s", f.SecretKeyRef.Key, f.SecretKeyRef.Namespace, f.SecretKeyRef.Name)
	}
	return "no reference"
}

// SecretReader reads a key of a Kubernetes Secret. A Secret or key that is not there is an error
// matching badinput.
type SecretReader func(ctx context.Context, namespace, name, key string) ([]byte, error)

// Resolver turns SecretValues into their values when they are used. Its errors name the field
// and the reference, never a value.
type Resolver struct {
	// LookupEnv reads ferry's environment (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Secret reads Secrets of the source cluster (blue for a run); Cluster names it in messages
	// ("context blue").
	Secret  SecretReader
	Cluster string
}

// Resolve returns the value v refers to; field names it in errors (bad input, exit 2).
func (r Resolver) Resolve(ctx context.Context, field string, v SecretValue) (string, error) {
	var errs []error
	v.validate(field, func(f, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", f, fmt.Sprintf(format, args...)))
	})
	if len(errs) > 0 {
		return "", badinput.Errorf("%w", errs[0])
	}
	if name := v.ValueFrom.Env; name != "" {
		if r.LookupEnv == nil {
			return "", badinput.Errorf("%s: environment variable %s cannot be read here", field, name)
		}
		val, ok := r.LookupEnv(name)
		if !ok || val == "" {
			return "", badinput.Errorf("%s: environment variable %s is not set or empty", field, name)
		}
		return val, nil
	}
	ref := v.ValueFrom.SecretKeyRef
	if r.Secret == nil {
		return "", badinput.Errorf("%s: %s cannot be read here: no cluster to read it from", field, v)
	}
	data, err := r.Secret(ctx, ref.Namespace, ref.Name, ref.Key)
	if err != nil {
		return "", fmt.Errorf("%s: %s on %s: %w", field, v, r.Cluster, err)
	}
	if len(data) == 0 {
		return "", badinput.Errorf("%s: %s on %s is empty", field, v, r.Cluster)
	}
	return string(data), nil
}

// ResolveAll resolves a map of SecretValues, field naming the map (e.g. traffic.webhook.headers).
func (r Resolver) ResolveAll(ctx context.Context, field string, m map[string]SecretValue) (map[string]string, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(m))
	for _, k := range keys {
		val, err := r.Resolve(ctx, field+"."+k, m[k])
		if err != nil {
			return nil, err
		}
		out[k] = val
	}
	return out, nil
}

// ClusterSecrets reads Secrets' keys through a cluster's dynamic client. A Secret or key that is
// not there, or that ferry may not read, is bad input naming it.
func ClusterSecrets(dyn dynamic.Interface) SecretReader {
	return func(ctx context.Context, namespace, name, key string) ([]byte, error) {
		s, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
			return nil, badinput.Errorf("Secret %s/%s: %v", namespace, name, err)
		case err != nil:
			return nil, fmt.Errorf("Secret %s/%s: %w", namespace, name, err)
		}
		enc, found, err := unstructured.NestedString(s.Object, "data", key)
		if err != nil || !found {
			return nil, badinput.Errorf("Secret %s/%s has no key %q", namespace, name, key)
		}
		data, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return nil, fmt.Errorf("Secret %s/%s: key %q is not base64", namespace, name, key)
		}
		return data, nil
	}
}
