package resources

import (
	"context"

	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans/rules"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// markDefault gives obj, about to be made on the target, the default mark its backed-up copy
// (backedUp) carries when the target has no default of the type (rules.DefaultMark): a target
// with one keeps it, and the object is made as one more class.
func (rs *restorer) markDefault(ctx context.Context, gvr schema.GroupVersionResource, mark *rules.DefaultMark, obj, backedUp map[string]any) {
	if mark == nil || !mark.Marked(backedUp) {
		return
	}
	name := (&unstructured.Unstructured{Object: obj}).GetName()
	current, err := rs.targetDefault(ctx, gvr, mark)
	switch {
	case err != nil:
		rs.Log.Warn("made without its default mark: the target's default cannot be read", "resource", gvr.Resource, "name", name, "err", err)
	case current != "" && current != name:
		rs.Log.Info("made without its default mark: the target has a default of its own", "resource", gvr.Resource, "name", name, "default", current)
	default:
		mark.Mark(obj, backedUp)
	}
}

// targetDefault is the name of the target's default object of the type, or "", read once per
// restore: a second default of the backup is marked as the first (the backup had both).
func (rs *restorer) targetDefault(ctx context.Context, gvr schema.GroupVersionResource, mark *rules.DefaultMark) (string, error) {
	rs.defaultsMu.Lock()
	defer rs.defaultsMu.Unlock()
	if name, ok := rs.defaults[gvr]; ok {
		return name, nil
	}
	name := ""
	err := kube.EachObject(ctx, rs.Dynamic, gvr, "", rs.PageSize, func(obj *unstructured.Unstructured) error {
		if name == "" && mark.Marked(obj.Object) {
			name = obj.GetName()
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	rs.defaults[gvr] = name
	return name, nil
}
