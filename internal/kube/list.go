package kube

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"
)

// listPagesAhead bounds the pages a list fetches ahead of fn: a lister of each type (or namespace)
// runs at once, and the pager's default of 10 pages each held tens of thousands of objects in
// memory while the archive's writer caught up.
const listPagesAhead = 2

// listPageBytes is about the most one page of a list holds, decoded many times over: a type of
// large objects (Helm's release Secrets reach 1 MiB each) is listed in pages of as many as fit,
// not of the page size, which with pages fetched ahead held gigabytes. The first page, whose
// objects' size is not known yet, holds at most listFirstPage.
const (
	listPageBytes = 8 << 20
	listFirstPage = 50
)

// Dynamic is a dynamic client whose lists EachObject decodes in one pass. client-go's decoder of
// an unstructured list reads a page five times (its kind, its items as raw messages, the whole
// page into maps that are then dropped, then each item again); on a backup of 50,000 objects that
// was half of ferry's CPU, on a machine whose API server shares the cores.
type Dynamic struct {
	dynamic.Interface
	rest rest.Interface
}

// NewDynamic makes the dynamic client of cfg, as dynamic.NewForConfig does, with fast lists.
func NewDynamic(cfg *rest.Config) (*Dynamic, error) {
	config := dynamic.ConfigFor(cfg)
	// As dynamic.NewForConfig: every request names its whole path.
	config.GroupVersion = nil
	config.APIPath = "/if-you-see-this-search-for-the-break"
	client, err := rest.UnversionedRESTClientFor(config)
	if err != nil {
		return nil, err
	}
	return &Dynamic{Interface: dynamic.New(client), rest: client}, nil
}

// EachObject lists the objects of gvr in namespace (every namespace when "") in pages of pageSize,
// fetching the next pages while fn handles one, and calls fn with each object.
func EachObject(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string, pageSize int64, fn func(*unstructured.Unstructured) error) error {
	page := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return dyn.Resource(gvr).Namespace(namespace).List(ctx, o)
	}
	if d, ok := dyn.(*Dynamic); ok {
		limit := min(pageSize, listFirstPage) // the pager asks for its pages one at a time
		page = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if limit > 0 && o.Limit > 0 { // Limit 0: the whole list, as the pager asks once a continue token expired
				o.Limit = limit
			}
			list, size, err := d.list(ctx, gvr, namespace, o)
			if err == nil && len(list.Items) > 0 && pageSize > 0 {
				limit = max(1, min(pageSize, int64(listPageBytes)*int64(len(list.Items))/max(size, 1)))
			}
			return list, err
		}
	}
	lister := pager.New(page)
	lister.PageSize = pageSize
	lister.PageBufferSize = listPagesAhead
	return lister.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		return fn(o.(*unstructured.Unstructured))
	})
}

// list gets one page of gvr's objects in namespace as the dynamic client's List does, and decodes
// it once into the same list; it also returns the page's size in bytes.
func (d *Dynamic) list(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, int64, error) {
	path := []string{"api"}
	if gvr.Group != "" {
		path = []string{"apis", gvr.Group}
	}
	path = append(path, gvr.Version)
	if namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	res := d.rest.Get().AbsPath(append(path, gvr.Resource)...).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		SetHeader("Accept", "application/json").Do(ctx)
	if err := res.Error(); err != nil { // the API server's Status, as the dynamic client's
		return nil, 0, err
	}
	body, _ := res.Raw()
	list, err := decodeList(body)
	return list, int64(len(body)), err
}

// decodeList decodes a list's JSON as unstructured.UnstructuredList's decoder does: numbers that
// are whole as int64, and items without a kind given the list's kind without "List".
func decodeList(body []byte) (*unstructured.UnstructuredList, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("decode a list: %w", err)
	}
	list := &unstructured.UnstructuredList{Object: obj}
	items, _ := obj["items"].([]any)
	if obj["items"] != nil && items == nil {
		return nil, fmt.Errorf("decode a list: its items are not a list")
	}
	delete(obj, "items")
	apiVersion, kind := list.GetAPIVersion(), strings.TrimSuffix(list.GetKind(), "List")
	list.Items = make([]unstructured.Unstructured, 0, len(items))
	for i, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("decode a list: item %d is not an object", i)
		}
		u := unstructured.Unstructured{Object: m}
		if u.GetKind() == "" && u.GetAPIVersion() == "" {
			u.SetKind(kind)
			u.SetAPIVersion(apiVersion)
		}
		list.Items = append(list.Items, u)
	}
	return list, nil
}
