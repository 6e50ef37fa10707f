package traffic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

var httpRoutes = schema.GroupVersionResource{Group: gatewayv1.GroupName, Version: "v1", Resource: "httproutes"}

// gateway sets the weights of an HTTPRoute's blue and green backendRefs in every rule that holds
// both, editing the route as unstructured data so that fields this build does not know survive.
// A change is in effect when every parent's Accepted condition is True at the route's generation.
type gateway struct {
	cfg    config.GatewayAPITraffic
	opts   Options
	client dynamic.ResourceInterface
}

func newGateway(cfg config.GatewayAPITraffic, opts Options) (*gateway, error) {
	if opts.RESTConfig == nil {
		return nil, errors.New("traffic gateway-api: no kubeconfig to reach the front cluster")
	}
	rc, err := opts.RESTConfig(cfg.Context)
	if err != nil {
		return nil, fmt.Errorf("traffic.gatewayAPI.context %q: %w", cfg.Context, err)
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("traffic.gatewayAPI.context %q: %w", cfg.Context, err)
	}
	return gatewayOn(dc, cfg, opts), nil
}

func gatewayOn(dc dynamic.Interface, cfg config.GatewayAPITraffic, opts Options) *gateway {
	return &gateway{cfg: cfg, opts: opts, client: dc.Resource(httpRoutes).Namespace(cfg.Namespace)}
}

func (g *gateway) Name() string {
	return fmt.Sprintf("gateway-api HTTPRoute %s/%s backends %s/%s", g.cfg.Namespace, g.cfg.Route, g.cfg.BlueBackend.Name, g.cfg.GreenBackend.Name)
}

func (g *gateway) where() string { return "httproute " + g.cfg.Namespace + "/" + g.cfg.Route }

// refWeight is one backendRef's weight as found: nil when the route leaves it to the default (1).
type refWeight struct {
	Rule   int    `json:"rule"`
	Ref    int    `json:"ref"`
	Name   string `json:"name"`
	Weight *int64 `json:"weight"`
}

type gatewayState struct {
	Route   string      `json:"route"`
	Weights []refWeight `json:"weights"`
}

// side tells whether a backendRef is blue's, green's or neither.
func (g *gateway) side(ref map[string]any) string {
	name, _, _ := unstructured.NestedString(ref, "name")
	kind, _, _ := unstructured.NestedString(ref, "kind")
	group, _, _ := unstructured.NestedString(ref, "group")
	ns, _, _ := unstructured.NestedString(ref, "namespace")
	port, hasPort, _ := unstructured.NestedInt64(ref, "port")
	if (kind != "" && kind != "Service") || group != "" || (ns != "" && ns != g.cfg.Namespace) {
		return ""
	}
	for _, b := range []struct {
		side string
		be   config.GatewayBackend
	}{{"blue", g.cfg.BlueBackend}, {"green", g.cfg.GreenBackend}} {
		if name == b.be.Name && (b.be.Port == 0 || hasPort && port == int64(b.be.Port)) {
			return b.side
		}
	}
	return ""
}

// rules calls fn for each backendRef of blue or green in the rules that hold both.
func (g *gateway) rules(route *unstructured.Unstructured, fn func(rule, ref int, side string, r map[string]any)) (found int, err error) {
	rules, _, err := unstructured.NestedSlice(route.Object, "spec", "rules")
	if err != nil {
		return 0, fmt.Errorf("%s: spec.rules: %w", g.where(), err)
	}
	for i, rule := range rules {
		rm, _ := rule.(map[string]any)
		refs, _, _ := unstructured.NestedSlice(rm, "backendRefs")
		sides := map[string]bool{}
		for _, ref := range refs {
			if rf, ok := ref.(map[string]any); ok {
				sides[g.side(rf)] = true
			}
		}
		if !sides["blue"] || !sides["green"] {
			continue
		}
		found++
		for j, ref := range refs {
			rf, _ := ref.(map[string]any)
			if s := g.side(rf); s != "" {
				fn(i, j, s, rf)
			}
		}
		rm["backendRefs"] = refs
		rules[i] = rm
	}
	if err := unstructured.SetNestedSlice(route.Object, rules, "spec", "rules"); err != nil {
		return 0, fmt.Errorf("%s: %w", g.where(), err)
	}
	return found, nil
}

func (g *gateway) get(ctx context.Context) (*unstructured.Unstructured, error) {
	route, err := g.client.Get(ctx, g.cfg.Route, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s in context %q: %w", g.where(), g.cfg.Context, err)
	}
	return route, nil
}

func (g *gateway) Preflight(ctx context.Context) error {
	route, err := g.get(ctx)
	if err != nil {
		return err
	}
	n, err := g.rules(route, func(int, int, string, map[string]any) {})
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: no rule has both backendRefs %s and %s", g.where(), g.cfg.BlueBackend.Name, g.cfg.GreenBackend.Name)
	}
	return nil
}

// splitOfRoute reads the weights of the first rule holding both backends.
func (g *gateway) splitOfRoute(route *unstructured.Unstructured) (Split, error) {
	weights := map[int]map[string]int{}
	n, err := g.rules(route, func(rule, _ int, side string, r map[string]any) {
		w, ok, _ := unstructured.NestedInt64(r, "weight")
		if !ok {
			w = 1 // the Gateway API's default
		}
		if weights[rule] == nil {
			weights[rule] = map[string]int{}
		}
		weights[rule][side] += int(w)
	})
	if err != nil {
		return Split{}, err
	}
	if n == 0 {
		return Split{}, fmt.Errorf("%s: no rule has both backendRefs %s and %s", g.where(), g.cfg.BlueBackend.Name, g.cfg.GreenBackend.Name)
	}
	first := -1
	for rule := range weights {
		if first < 0 || rule < first {
			first = rule
		}
	}
	s, ok := splitOf(weights[first]["blue"], weights[first]["green"])
	if !ok {
		return Split{}, fmt.Errorf("%s: rule %d gives blue and green weight 0", g.where(), first)
	}
	return s, nil
}

func (g *gateway) Current(ctx context.Context) (Split, error) {
	route, err := g.get(ctx)
	if err != nil {
		return Split{}, err
	}
	return g.splitOfRoute(route)
}

func (g *gateway) Save(ctx context.Context) (State, error) {
	route, err := g.get(ctx)
	if err != nil {
		return nil, err
	}
	st := gatewayState{Route: g.cfg.Namespace + "/" + g.cfg.Route}
	if _, err := g.rules(route, func(rule, ref int, _ string, r map[string]any) {
		rw := refWeight{Rule: rule, Ref: ref}
		rw.Name, _, _ = unstructured.NestedString(r, "name")
		if w, ok, _ := unstructured.NestedInt64(r, "weight"); ok {
			rw.Weight = &w
		}
		st.Weights = append(st.Weights, rw)
	}); err != nil {
		return nil, err
	}
	data, err := json.Marshal(st)
	return State(data), err
}

// update applies set to a fresh copy of the route until the write does not conflict.
func (g *gateway) update(ctx context.Context, set func(route *unstructured.Unstructured) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		route, err := g.get(ctx)
		if err != nil {
			return err
		}
		if err := set(route); err != nil {
			return err
		}
		if _, err := g.client.Update(ctx, route, metav1.UpdateOptions{FieldManager: "ferry"}); err != nil {
			return fmt.Errorf("update %s: %w", g.where(), err)
		}
		return nil
	})
}

func (g *gateway) Apply(ctx context.Context, s Split) error {
	if err := s.Valid(); err != nil {
		return err
	}
	g.opts.Logger.Info("gateway-api: setting backend weights", "route", g.cfg.Namespace+"/"+g.cfg.Route, "split", s.String())
	return g.update(ctx, func(route *unstructured.Unstructured) error {
		_, err := g.rules(route, func(_, _ int, side string, r map[string]any) {
			w := s.Blue
			if side == "green" {
				w = s.Green
			}
			r["weight"] = int64(w)
		})
		return err
	})
}

func (g *gateway) WaitSettled(ctx context.Context, s Split) error {
	return g.waitAccepted(ctx, func(route *unstructured.Unstructured) (bool, string) {
		got, err := g.splitOfRoute(route)
		if err != nil || got != s {
			return false, fmt.Sprintf("weights say %v", got)
		}
		return true, ""
	})
}

// waitAccepted waits until want holds and every parent accepted the route at its generation.
func (g *gateway) waitAccepted(ctx context.Context, want func(*unstructured.Unstructured) (bool, string)) error {
	return poll(ctx, g.opts.PollInterval, g.where(), func(ctx context.Context) (bool, string, error) {
		route, err := g.get(ctx)
		if err != nil {
			return false, "", err
		}
		if ok, seen := want(route); !ok {
			return false, seen, nil
		}
		var typed gatewayv1.HTTPRoute
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(route.Object, &typed); err != nil {
			return false, "", fmt.Errorf("%s: %w", g.where(), err)
		}
		gen := typed.Generation
		if len(typed.Status.Parents) == 0 {
			return false, fmt.Sprintf("generation %d, no parent reports a status yet", gen), nil
		}
		var waiting []string
		for _, p := range typed.Status.Parents {
			parent := string(p.ParentRef.Name)
			c := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionAccepted))
			switch {
			case c == nil || c.ObservedGeneration != gen:
				waiting = append(waiting, fmt.Sprintf("parent %s has not accepted generation %d", parent, gen))
			case c.Status != metav1.ConditionTrue:
				return false, "", fmt.Errorf("%s: parent %s does not accept generation %d: %s: %s", g.where(), parent, gen, c.Reason, c.Message)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; "), nil
	})
}

func (g *gateway) Restore(ctx context.Context, st State) error {
	var saved gatewayState
	if err := json.Unmarshal(st, &saved); err != nil {
		return fmt.Errorf("gateway-api: saved state: %w", err)
	}
	if saved.Route != g.cfg.Namespace+"/"+g.cfg.Route {
		return fmt.Errorf("gateway-api: the saved state is of route %s, not %s/%s", saved.Route, g.cfg.Namespace, g.cfg.Route)
	}
	matches := func(route *unstructured.Unstructured, set bool) (bool, error) {
		// In place, not through NestedSlice's copies: set changes the route itself.
		spec, _ := route.Object["spec"].(map[string]any)
		rules, _ := spec["rules"].([]any)
		same := true
		for _, w := range saved.Weights {
			if w.Rule >= len(rules) {
				return false, fmt.Errorf("%s: rule %d of the saved state is gone", g.where(), w.Rule)
			}
			rule, _ := rules[w.Rule].(map[string]any)
			refs, _ := rule["backendRefs"].([]any)
			if w.Ref >= len(refs) {
				return false, fmt.Errorf("%s: rule %d lost backendRef %d (%s) of the saved state", g.where(), w.Rule, w.Ref, w.Name)
			}
			ref, _ := refs[w.Ref].(map[string]any)
			if name, _, _ := unstructured.NestedString(ref, "name"); name != w.Name {
				return false, fmt.Errorf("%s: rule %d backendRef %d is %s, saved as %s", g.where(), w.Rule, w.Ref, name, w.Name)
			}
			cur, has, _ := unstructured.NestedInt64(ref, "weight")
			same = same && has == (w.Weight != nil) && (w.Weight == nil || cur == *w.Weight)
			if set {
				if w.Weight == nil {
					delete(ref, "weight")
				} else {
					ref["weight"] = *w.Weight
				}
			}
		}
		return same, nil
	}
	g.opts.Logger.Info("gateway-api: restoring the saved weights", "route", saved.Route)
	if err := g.update(ctx, func(route *unstructured.Unstructured) error {
		_, err := matches(route, true)
		return err
	}); err != nil {
		return err
	}
	return g.waitAccepted(ctx, func(route *unstructured.Unstructured) (bool, string) {
		same, err := matches(route.DeepCopy(), false)
		if err != nil || !same {
			return false, "weights differ from the saved ones"
		}
		return true, ""
	})
}
