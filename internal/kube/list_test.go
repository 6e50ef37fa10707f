package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// pages are what a fake API server answers to lists: a core type in two pages whose items carry
// no kind (as the API server sends them), with numbers of each JSON shape; a custom resource whose
// items carry their kind; and a type the identity may not list.
var pages = map[string]string{
	"/api/v1/namespaces/team-a/configmaps?limit=2": `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"next"},
		"items":[{"metadata":{"name":"a","namespace":"team-a","generation":3},"data":{"k":"v"}},
		{"metadata":{"name":"b","namespace":"team-a"},"binaryData":{"b":"AAE="},"x":[1,2.5,-3,1e3,12345678901234,null,true,{"y":[]}]}]}`,
	"/api/v1/namespaces/team-a/configmaps?continue=next&limit=2": `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},
		"items":[{"metadata":{"name":"c","namespace":"team-a","labels":{"app":"x"}},"data":{}}]}`,
	"/apis/kubeflow.org/v1/profiles?limit=2": `{"kind":"ProfileList","apiVersion":"kubeflow.org/v1","metadata":{"resourceVersion":"9"},
		"items":[{"apiVersion":"kubeflow.org/v1","kind":"Profile","metadata":{"name":"alice"},"spec":{"owner":{"kind":"User","name":"alice@example.com"}}}]}`,
	"/apis/kubeflow.org/v1/emptys?limit=2": `{"kind":"EmptyList","apiVersion":"kubeflow.org/v1","metadata":{"resourceVersion":"9"},"items":null}`,
}

func fakeAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/secrets") {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"secrets is forbidden"}`)
			return
		}
		body, ok := pages[r.URL.Path+"?"+r.URL.RawQuery]
		if !ok {
			t.Errorf("unexpected request %s", r.URL)
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL}
}

// TestFastListDecodesAsClientGo lists through the fast lister and through client-go's dynamic
// client from the same server, and wants the same objects, in the same order, and the same errors.
func TestFastListDecodesAsClientGo(t *testing.T) {
	cfg := fakeAPIServer(t)
	fast, err := NewDynamic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		gvr       schema.GroupVersionResource
		namespace string
		want      int
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "team-a", 3},
		{schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "profiles"}, "", 1},
		{schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "emptys"}, "", 0},
	} {
		t.Run(tc.gvr.Resource, func(t *testing.T) {
			collect := func(dyn dynamic.Interface) []unstructured.Unstructured {
				var got []unstructured.Unstructured
				if err := EachObject(ctx, dyn, tc.gvr, tc.namespace, 2, func(o *unstructured.Unstructured) error {
					got = append(got, *o)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				return got
			}
			got, want := collect(fast), collect(plain)
			if len(got) != tc.want || !reflect.DeepEqual(got, want) {
				t.Errorf("fast list:\n%v\nclient-go:\n%v", got, want)
			}
			// One page, its list's own fields too.
			page, _, err := fast.list(ctx, tc.gvr, tc.namespace, metav1.ListOptions{Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := plain.Resource(tc.gvr).Namespace(tc.namespace).List(ctx, metav1.ListOptions{Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(page, ref) {
				t.Errorf("fast page:\n%v\nclient-go:\n%v", page, ref)
			}
		})
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	err = EachObject(ctx, fast, secrets, "team-a", 2, func(*unstructured.Unstructured) error { return nil })
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "secrets is forbidden") {
		t.Errorf("a forbidden list: %v, want the API server's forbidden error", err)
	}
}

func TestDecodeListRefusesBadLists(t *testing.T) {
	for _, body := range []string{`{"items":{}}`, `{"items":[1]}`, `{"items":[`, `[]`} {
		if _, err := decodeList([]byte(body)); err == nil {
			t.Errorf("%s: decoded without error", body)
		}
	}
}

// BenchmarkDecodeList decodes a page of 500 ConfigMaps as the fast lister does, beside client-go's
// decoder of the same page (the reference).
func BenchmarkDecodeList(b *testing.B) {
	var page strings.Builder
	page.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[`)
	for i := range 500 {
		if i > 0 {
			page.WriteString(",")
		}
		fmt.Fprintf(&page, `{"metadata":{"name":"cm-%d","namespace":"bench","uid":"%032d","resourceVersion":"%d","creationTimestamp":"2026-12-01T00:00:00Z","labels":{"app":"bench","index":"%d"},"managedFields":[{"manager":"objbench","operation":"Update","apiVersion":"v1","time":"2026-12-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:a":{},"f:b":{}}}}]},"data":{"a":"%s","b":"%d"}}`,
			i, i, 1000+i, i, strings.Repeat("x", 200), i)
	}
	page.WriteString("]}")
	body := []byte(page.String())
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			if _, err := decodeList(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client-go", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for range b.N {
			var list unstructured.UnstructuredList
			if err := list.UnmarshalJSON(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestListPagesFitInMemory: a type of large objects (Helm's release Secrets reach 1 MiB each) is
// listed in pages of about listPageBytes, not of the page size: 500 of them at once, with pages
// fetched ahead, held gigabytes. A type of small objects gets the page size after its first page.
func TestListPagesFitInMemory(t *testing.T) {
	for _, tc := range []struct {
		name       string
		objectSize int
		objects    int
		wantMax    int64 // the largest limit after the first page
	}{
		{"large objects", 256 << 10, 200, listPageBytes / (256 << 10)},
		{"small objects", 512, 3000, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var limits []int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var limit, from int
				fmt.Sscan(r.URL.Query().Get("limit"), &limit)
				fmt.Sscan(r.URL.Query().Get("continue"), &from)
				limits = append(limits, int64(limit))
				to := min(from+limit, tc.objects)
				var items []string
				for i := from; i < to; i++ {
					items = append(items, fmt.Sprintf(`{"metadata":{"name":"s%d","namespace":"apps"},"data":{"release":%q}}`, i, strings.Repeat("x", tc.objectSize)))
				}
				next := ""
				if to < tc.objects {
					next = fmt.Sprint(to)
				}
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"kind":"SecretList","apiVersion":"v1","metadata":{"continue":%q},"items":[%s]}`, next, strings.Join(items, ","))
			}))
			defer srv.Close()
			dyn, err := NewDynamic(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			err = EachObject(context.Background(), dyn, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "", 500, func(*unstructured.Unstructured) error {
				seen++
				return nil
			})
			if err != nil || seen != tc.objects {
				t.Fatalf("listed %d of %d objects: %v", seen, tc.objects, err)
			}
			if limits[0] > 500 || int64(tc.objectSize)*limits[0] > 64<<20 {
				t.Errorf("first page of %d objects of %d bytes", limits[0], tc.objectSize)
			}
			if len(limits) < 2 {
				t.Fatalf("%d objects of %d bytes listed in one page (limits %v)", tc.objects, tc.objectSize, limits)
			}
			largest := slices.Max(limits[1:])
			if largest > tc.wantMax || (tc.wantMax == 500 && largest != 500) {
				t.Errorf("pages after the first: limits %v, want at most %d (objects of %d bytes)", limits[1:], tc.wantMax, tc.objectSize)
			}
		})
	}
}
