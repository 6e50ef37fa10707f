package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestHideValues(t *testing.T) {
	for _, tc := range []struct{ name, msg, want string }{
		{"a pod template as JSON",
			`Job.batch "nightly" is invalid: spec.template: Invalid value: {"metadata":{"labels":{"job-name":"nightly"}},"spec":{"containers":[{"name":"report","env":[{"name":"TOKEN","value":"hunter2 } ] \" {"}]}]}}: field is immutable`,
			`Job.batch "nightly" is invalid: spec.template: Invalid value: (a value not shown): field is immutable`},
		{"Go's print of an internal type",
			`Job.batch "nightly" is invalid: spec.template: Invalid value: core.PodTemplateSpec{ObjectMeta:v1.ObjectMeta{Name:""}, Spec:core.PodSpec{Containers:[]core.Container{core.Container{Env:[]core.EnvVar{core.EnvVar{Name:"TOKEN", Value:"hunter2", ValueFrom:(*core.EnvVarSource)(nil)}}}}}}: field is immutable`,
			`Job.batch "nightly" is invalid: spec.template: Invalid value: (a value not shown): field is immutable`},
		{"a map and a pointer",
			`X "a" is invalid: [spec.a: Invalid value: map[string]string{"k":"hunter2"}: bad, spec.b: Duplicate value: (*core.Secret)(nil)]`,
			`X "a" is invalid: [spec.a: Invalid value: (a value not shown): bad, spec.b: Duplicate value: (a value not shown)]`},
		{"a list, its field named after it",
			`Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["None"]: may not change once set`,
			`Service "web" is invalid: spec.clusterIPs[0]: Invalid value: (a value not shown): may not change once set`},
		{"strings go, numbers and words stay",
			`DatabaseUser.example.com "app" is invalid: [spec.password: Invalid value: "hunter2 \" ]": spec.password in body should match '^[a-z]+$', spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.x: Unsupported value: "y": supported values: "a", "b", spec.on: Invalid value: true: must be false]`,
			`DatabaseUser.example.com "app" is invalid: [spec.password: Invalid value: (a value not shown): spec.password in body should match '^[a-z]+$', spec.replicas: Invalid value: -1: must be greater than or equal to 0, spec.x: Unsupported value: (a value not shown): supported values: "a", "b", spec.on: Invalid value: true: must be false]`},
		{"a pointer as Go prints it",
			`spec.template: Invalid value: &core.PodSpec{Containers:[]core.Container{core.Container{Env:[]core.EnvVar{core.EnvVar{Value:"hunter2"}}}}}: field is immutable`,
			`spec.template: Invalid value: (a value not shown): field is immutable`},
		{"no value at all",
			`Secret "creds" is invalid: data: Forbidden: field is immutable when ` + "`immutable`" + ` is set`,
			`Secret "creds" is invalid: data: Forbidden: field is immutable when ` + "`immutable`" + ` is set`},
		{"cut short", `spec.template: Invalid value: {"spec":{"env":"hunter2`, `spec.template: Invalid value: (a value not shown)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HideValues(tc.msg); got != tc.want {
				t.Errorf("HideValues:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// An API server's refusal as invalid reaches the caller as one (apierrors.IsInvalid), with its
// field errors, and without the values it quoted.
func TestWithoutInvalidValues(t *testing.T) {
	template := map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"env": []any{map[string]any{"name": "TOKEN", "value": "hunter2"}}}}}}
	refusal := apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "nightly",
		field.ErrorList{field.Invalid(field.NewPath("spec", "template"), template, "field is immutable")})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		status := refusal.Status()
		status.Kind, status.APIVersion = "Status", "v1"
		if err := json.NewEncoder(w).Encode(status); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	err := updateThrough(t, srv.URL)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("the error is not the API server's refusal as invalid: %v", err)
	}
	var causes []string
	if status, ok := err.(apierrors.APIStatus); ok && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			causes = append(causes, c.Field+": "+c.Message)
		}
	}
	if strings.Contains(err.Error(), "hunter2") || strings.Contains(strings.Join(causes, "\n"), "hunter2") ||
		!strings.Contains(err.Error(), `spec.template: Invalid value: (a value not shown): field is immutable`) || len(causes) != 1 {
		t.Errorf("error %q, causes %q", err, causes)
	}
}

// An answer not in JSON (CBOR, which clients may ask for) is not read for values: not shown.
func TestWithoutInvalidValuesOfAnotherEncoding(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/cbor")
		w.WriteHeader(http.StatusUnprocessableEntity)
		w.Write([]byte("\xa1hunter2"))
	}))
	defer srv.Close()
	err := updateThrough(t, srv.URL)
	if !apierrors.IsInvalid(err) || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "not shown (application/cbor)") {
		t.Errorf("error %v", err)
	}
}

// updateThrough updates a Job through WithoutInvalidValues at the server host, and returns the
// error the client sees.
func updateThrough(t *testing.T, host string) error {
	t.Helper()
	cfg := &rest.Config{Host: host}
	cfg.Wrap(WithoutInvalidValues)
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kc.BatchV1().Jobs("reports").Update(context.Background(), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}}, metav1.UpdateOptions{})
	return err
}
