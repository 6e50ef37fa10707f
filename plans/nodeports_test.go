package plans

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

func service(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheckNodePorts(t *testing.T) {
	target := []runtime.Object{
		&unstructured.Unstructured{Object: service(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"other","namespace":"b"},"spec":{"ports":[{"port":80,"nodePort":30080}]}}`)},
		&unstructured.Unstructured{Object: service(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"a2"},"spec":{"ports":[{"port":80,"nodePort":30081}]}}`)},
	}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{servicesGVR: "ServiceList"}, target...)
	p := &Plan{Config: config.Planning{NamespaceMap: map[string]string{"a": "a2"}}, NodePorts: []NodePort{
		{Namespace: "a", Service: "front", Port: "http", NodePort: 30080}, // held by another service: blocks
		{Namespace: "a", Service: "web", Port: "http", NodePort: 30081},   // its own, restored before
		{Namespace: "a", Service: "api", Port: "http", NodePort: 30082},   // free
	}}
	if err := checkNodePorts(context.Background(), p, Clients{Dynamic: dyn}); err != nil {
		t.Fatal(err)
	}
	want := []Finding{{Severity: Blocking, Subject: "service a2/front", Message: "node port 30080 (http) was chosen on the source and is taken on the target by service b/other: free it there, or change the port on the source"}}
	if !reflect.DeepEqual(p.Findings, want) {
		t.Errorf("findings %+v, want %+v", p.Findings, want)
	}
}
