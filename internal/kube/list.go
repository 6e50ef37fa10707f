package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/pager"
)

// listPagesAhead bounds the pages a list fetches ahead of fn: a lister of each type (or namespace)
// runs at once, and the pager's default of 10 pages each held tens of thousands of objects in
// memory while the archive's writer caught up.
const listPagesAhead = 2

// EachObject lists the objects of gvr in namespace (every namespace when "") in pages of pageSize,
// fetching the next pages while fn handles one, and calls fn with each object.
func EachObject(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string, pageSize int64, fn func(*unstructured.Unstructured) error) error {
	lister := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return dyn.Resource(gvr).Namespace(namespace).List(ctx, o)
	})
	lister.PageSize = pageSize
	lister.PageBufferSize = listPagesAhead
	return lister.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		return fn(o.(*unstructured.Unstructured))
	})
}
