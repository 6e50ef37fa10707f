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

func TestCheckChosenAddresses(t *testing.T) {
	target := []runtime.Object{
		&unstructured.Unstructured{Object: service(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"other","namespace":"b"},"spec":{"clusterIPs":["10.0.0.20"],"ports":[{"port":80,"nodePort":30080}]}}`)},
		&unstructured.Unstructured{Object: service(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"a2"},"spec":{"clusterIPs":["10.0.0.21"],"ports":[{"port":80,"nodePort":30081}]}}`)},
		&unstructured.Unstructured{Object: service(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"api","namespace":"a2"},"spec":{"clusterIPs":["10.0.0.30","fd00::1"]}}`)},
		&unstructured.Unstructured{Object: service(t, `{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR","metadata":{"name":"kubernetes"},"spec":{"cidrs":["10.0.0.0/24","fd00::/108"]}}`)},
	}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{servicesGVR: "ServiceList", serviceCIDRsGVR: "ServiceCIDRList"}, target...)
	p := &Plan{Config: config.Planning{NamespaceMap: map[string]string{"a": "a2"}}, NodePorts: []NodePort{
		{Namespace: "a", Service: "front", Port: "http", NodePort: 30080}, // held by another service: blocks
		{Namespace: "a", Service: "web", Port: "http", NodePort: 30081},   // its own, restored before
		{Namespace: "a", Service: "api", Port: "http", NodePort: 30082},   // free
	}, ClusterIPs: []ClusterIP{
		{Namespace: "a", Service: "nfs", IP: "10.0.0.20"}, // held by another service: blocks
		{Namespace: "a", Service: "web", IP: "10.0.0.21"}, // its own
		{Namespace: "a", Service: "dns", IP: "10.0.0.22"}, // free
		{Namespace: "a", Service: "far", IP: "10.1.0.9"},  // outside the target's ranges: blocks
		{Namespace: "a", Service: "api", IP: "10.0.0.23"}, // its own has another: warns
		{Namespace: "a", Service: "v6", IP: "fd00:0::1"},  // held by api, written otherwise: blocks
	}}
	if err := checkChosenAddresses(context.Background(), p, Clients{Dynamic: dyn}); err != nil {
		t.Fatal(err)
	}
	want := []Finding{
		{Severity: Blocking, Subject: "service a2/front", Message: "node port 30080 (http) was chosen on the source and is taken on the target by service b/other: free it there, or change the port on the source"},
		{Severity: Blocking, Subject: "service a2/nfs", Message: "cluster IP 10.0.0.20 was chosen on the source and is taken on the target by service b/other: free it there, or change the IP on the source"},
		{Severity: Blocking, Subject: "service a2/far", Message: "cluster IP 10.1.0.9 was chosen on the source and is outside the target's service ranges (10.0.0.0/24, fd00::/108)"},
		{Severity: Warning, Subject: "service a2/api", Message: "cluster IP 10.0.0.23 was chosen on the source; the target's service of that name has 10.0.0.30, and a cluster IP cannot change: the restore leaves it (or, replacing it, fails) unless it is deleted there first"},
		{Severity: Blocking, Subject: "service a2/v6", Message: "cluster IP fd00:0::1 was chosen on the source and is taken on the target by service a2/api: free it there, or change the IP on the source"},
	}
	if !reflect.DeepEqual(p.Findings, want) {
		t.Errorf("findings %+v, want %+v", p.Findings, want)
	}
}
