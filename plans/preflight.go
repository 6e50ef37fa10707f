package plans

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/ferrykube/ferry/plans/config"
	"github.com/ferrykube/ferry/plans/rules"

	"golang.org/x/mod/semver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	storageClassesGVR    = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
	persistentVolumesGVR = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	claimsGVR            = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	namespacesGVR        = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	servicesGVR          = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	webhookGVRs          = []schema.GroupVersionResource{
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
	}
)

// Preflight checks the target against the plan and adds its findings: resource types the target
// neither serves nor gets from a CRD in the plan, storage classes it lacks (unless mapped),
// namespaces that already exist, webhooks whose services are missing, node ports chosen on the
// source that the target's Services hold, and a target older than the source.
func Preflight(ctx context.Context, p *Plan, target Clients, targetContext string) error {
	tc, err := identify(ctx, target, targetContext)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	p.Target = &tc
	if tc.UID != "" && tc.UID == p.Source.UID {
		p.block("target", "the target is the source cluster (kube-system UID %s)", tc.UID)
	}
	if older(tc.Version, p.Source.Version) {
		p.warn("target", "Kubernetes %s is older than the source's %s: APIs may be missing or behave differently", tc.Version, p.Source.Version)
	}
	servedList, err := discoverAll(target)
	if err != nil {
		return err
	}
	fromCRDs := map[string]bool{}
	for _, c := range p.CRDs {
		fromCRDs[c.Name] = true
	}
	for _, r := range p.Resources {
		gr := r.GroupResource()
		switch {
		case servedList[gr]:
		case fromCRDs[gr]:
			// Provided by a CRD the restore creates first; not a finding.
		default:
			p.block(gr, "the target does not serve %s and no CRD in the plan provides it (%d objects)", gr, r.Count)
		}
	}

	findings, err := CheckClaimClasses(ctx, p.Volumes, p.Config.StorageClassMap, p.Config.NamespaceMap, target)
	if err != nil {
		return err
	}
	p.Findings = append(p.Findings, findings...)

	for _, ns := range namespacesOf(p) {
		if p.Upgrade.LeftNamespace(ns) {
			continue // green's release has it, and none of blue's objects there moves
		}
		_, err := target.Dynamic.Resource(namespacesGVR).Get(ctx, p.Config.MapNamespace(ns), metav1.GetOptions{})
		if err == nil {
			p.warn("namespace "+p.Config.MapNamespace(ns), "already exists on the target; its objects meet the existing-object policy")
		} else if !apierrors.IsNotFound(err) {
			return fmt.Errorf("target: get namespace %s: %w", ns, err)
		}
	}
	if err := checkChosenAddresses(ctx, p, target); err != nil {
		return err
	}
	if err := checkDataPlaces(ctx, p, target); err != nil {
		return err
	}
	return checkWebhooks(ctx, p, target)
}

// checkDataPlaces finds the databases and buckets the restore would find no server for on the
// target: in an upgrade, where green's release runs none (Kubeflow's releases after 1.11 serve
// the pipelines' objects from SeaweedFS, not MinIO) and blue's is left to the release, or where
// the target section says and green lacks it, which blocks; the source's workload that the
// selection leaves out, which blocks; a target section's own workload the target lacks in a plain
// migration, which warns (objects the restore makes may make it: an operator's). A migration
// would otherwise stop blue's writers and fail at the data.
func checkDataPlaces(ctx context.Context, p *Plan, target Clients) error {
	placement := PlacementOf(p)
	type place struct{ namespace, workload string }
	check := func(kind, name string, source, onTarget place) error {
		if onTarget.workload == "" { // a bucket reached at an endpoint
			return nil
		}
		w, _, err := WorkloadPod(ctx, target.Dynamic, onTarget.namespace, onTarget.workload)
		if err != nil {
			return fmt.Errorf("target: %w", err)
		}
		if w != nil {
			return nil
		}
		subject := kind + " " + name
		if onTarget != (place{p.Config.MapNamespace(source.namespace), source.workload}) {
			if placement != nil {
				p.block(subject, "green's release runs no %s in namespace %s, where the %s's target section keeps it", onTarget.workload, onTarget.namespace, kind)
			} else {
				p.warn(subject, "the target runs no %s in namespace %s, where the %s's target section keeps it, unless objects the restore makes create it", onTarget.workload, onTarget.namespace, kind)
			}
			return nil
		}
		workloadKind, workloadName, err := config.ParseWorkload(source.workload)
		if err != nil {
			return nil
		}
		gr := workloadKind + "s.apps"
		switch {
		case placement != nil && !placement.Moves(gr, source.namespace, workloadName):
			p.block(subject, "green's release runs no %s in namespace %s, where blue keeps the %s, and the upgrade leaves blue's to the release: "+
				"name where green keeps it in the %s's target section", onTarget.workload, onTarget.namespace, kind, kind)
		case !movesType(p, gr, source.namespace):
			p.block(subject, "the target runs no %s in namespace %s, where the source keeps the %s, and the restore does not make it (the selection "+
				"leaves out the %s there): run it there first, or name where the target keeps the %s in its target section", onTarget.workload, onTarget.namespace, kind, gr, kind)
		}
		return nil
	}
	// The Secret a target section names is the target's own: the restore reads the target's
	// credentials from it, after the quiesce.
	checkSecret := func(kind, name, namespace string, secret *config.SecretRef, keys ...string) error {
		if namespace == "" {
			return nil // a bucket at an endpoint, its Secret nowhere to look for
		}
		problem, err := secretProblem(ctx, target.Dynamic, namespace, secret, keys)
		if err != nil || problem == "" {
			return err
		}
		if placement != nil {
			p.block(kind+" "+name, "the %s's target section names credentials green lacks: %s", kind, problem)
		} else {
			p.warn(kind+" "+name, "the %s's target section names credentials the target lacks: %s, unless objects the restore makes create them", kind, problem)
		}
		return nil
	}
	for _, item := range p.Databases {
		if cfg, ok := p.Config.DatabaseNamed(item.Name); ok && item.Found {
			on := cfg.OnTarget(p.Config.MapNamespace)
			if err := check("database", item.Name, place{cfg.Namespace, cfg.Workload}, place{on.Namespace, on.Workload}); err != nil {
				return err
			}
			if cfg.Target != nil && cfg.Target.Secret != nil {
				if err := checkSecret("database", item.Name, on.Namespace, on.Secret, secretKey(on.Secret, "user"), secretKey(on.Secret, "password")); err != nil {
					return fmt.Errorf("target: %w", err)
				}
			}
		}
	}
	for _, item := range p.Buckets {
		if cfg, ok := p.Config.BucketNamed(item.Name); ok && item.Found {
			on := cfg.OnTarget(p.Config.MapNamespace)
			if err := check("bucket", item.Name, place{cfg.Namespace, cfg.Workload}, place{on.Namespace, on.Workload}); err != nil {
				return err
			}
			if cfg.Target != nil && cfg.Target.Secret != nil {
				if err := checkSecret("bucket", item.Name, on.Namespace, on.Secret, secretKey(on.Secret, "access"), secretKey(on.Secret, "secret")); err != nil {
					return fmt.Errorf("target: %w", err)
				}
			}
		}
	}
	return nil
}

// movesType says whether the plan moves objects of type gr from namespace.
func movesType(p *Plan, gr, namespace string) bool {
	return slices.ContainsFunc(p.Resources, func(r Resource) bool {
		_, ok := r.Namespaces[namespace]
		return r.GroupResource() == gr && ok
	})
}

// checkWebhooks blocks on the target's own webhooks that fail closed while their service is
// missing (every restore request would be refused).
func checkWebhooks(ctx context.Context, p *Plan, target Clients) error {
	for _, gvr := range webhookGVRs {
		list, err := target.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("target: list %s: %w", gvr.Resource, err)
		}
		for _, cfg := range list.Items {
			hooks, _, _ := unstructured.NestedSlice(cfg.Object, "webhooks")
			for _, h := range hooks {
				hm := h.(map[string]any)
				ns, _, _ := unstructured.NestedString(hm, "clientConfig", "service", "namespace")
				name, _, _ := unstructured.NestedString(hm, "clientConfig", "service", "name")
				if name == "" {
					continue
				}
				policy, _, _ := unstructured.NestedString(hm, "failurePolicy")
				_, err := target.Dynamic.Resource(servicesGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					subject := fmt.Sprintf("%s %s", gvr.Resource, cfg.GetName())
					if policy == "Ignore" {
						p.warn(subject, "webhook %s calls service %s/%s, which does not exist on the target (failurePolicy Ignore)", hm["name"], ns, name)
					} else {
						p.block(subject, "webhook %s calls service %s/%s, which does not exist on the target, and fails closed: requests it matches would be refused", hm["name"], ns, name)
					}
				} else if err != nil {
					return fmt.Errorf("target: get service %s/%s: %w", ns, name, err)
				}
			}
		}
	}
	return nil
}

func discoverAll(c Clients) (map[string]bool, error) {
	_, lists, err := c.Discovery.ServerGroupsAndResources()
	if err != nil && lists == nil {
		return nil, fmt.Errorf("target: discover the API: %w", err)
	}
	out := map[string]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			out[groupResource(gv.Group, r.Name)] = true
		}
	}
	return out, nil
}

// namespacesOf lists the namespaces the plan fills, but for those every cluster has.
func namespacesOf(p *Plan) []string {
	seen := map[string]bool{}
	for _, r := range p.Resources {
		for ns := range r.Namespaces {
			if !rules.SystemNamespace(ns) {
				seen[ns] = true
			}
		}
	}
	for _, t := range p.Tenants {
		seen[t.Namespace] = true
	}
	var out []string
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// older reports whether version a is older than b (major.minor only: patch releases do not matter).
func older(a, b string) bool {
	mm := func(v string) string {
		v, _, _ = strings.Cut(v, "+") // build metadata such as "+$Format:%H$" is not semver
		return semver.MajorMinor(semver.Canonical(v))
	}
	return mm(a) != "" && mm(b) != "" && semver.Compare(mm(a), mm(b)) < 0
}

// CheckClaimClasses finds the claims that would wait for ever on the target, and their files
// with them: of a storage class it lacks (classMap applied), of the default class where it has
// none, or of no class (storageClassName "") with no volume of the target made for them (see
// checkHandMade). Claims the target has already (nsMap applied) are left to the existing-object
// policy. A restore checks its backup's claims so, as a migration's preflight does.
func CheckClaimClasses(ctx context.Context, volumes []Volume, classMap, nsMap map[string]string, target Clients) ([]Finding, error) {
	if len(volumes) == 0 {
		return nil, nil
	}
	p := &Plan{Config: config.Planning{StorageClassMap: classMap, NamespaceMap: nsMap}}
	existing := map[string]bool{}
	claims, err := target.Dynamic.Resource(claimsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("target: list persistent volume claims: %w", err)
	}
	for _, c := range claims.Items {
		existing[c.GetNamespace()+"/"+c.GetName()] = true
	}
	classes := map[string]bool{}
	static := map[string]bool{} // classes whose provisioner makes no volumes
	defaultClass := ""
	list, err := target.Dynamic.Resource(storageClassesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("target: list storage classes: %w", err)
	}
	for _, sc := range list.Items {
		classes[sc.GetName()] = true
		if rules.For("storageclasses.storage.k8s.io").Default.Marked(sc.Object) {
			defaultClass = sc.GetName()
		}
		if provisioner, _, _ := unstructured.NestedString(sc.Object, "provisioner"); provisioner == noProvisioner {
			static[sc.GetName()] = true
		}
	}
	needed := map[string][]string{}
	var handMade []handMadeClaim
	for _, v := range volumes {
		if existing[p.Config.MapNamespace(v.Namespace)+"/"+v.Name] {
			continue
		}
		class := v.StorageClass
		if mapped, ok := classMap[class]; ok && (class != "" || v.NoClass) {
			class = mapped
		} else if v.NoClass {
			handMade = append(handMade, handMadeClaim{Volume: v, why: noClassClaims})
			continue
		}
		needed[class] = append(needed[class], v.Namespace+"/"+v.Name)
		bound := cmp.Or(class, defaultClass)
		switch {
		case v.Selector != nil:
			handMade = append(handMade, handMadeClaim{Volume: v, class: bound, why: selectingClaims})
		case static[bound]:
			handMade = append(handMade, handMadeClaim{Volume: v, class: bound, why: staticClassClaims})
		}
	}
	if err := checkHandMade(ctx, p, target, handMade); err != nil {
		return nil, err
	}
	for _, class := range slices.Sorted(maps.Keys(needed)) {
		claims := needed[class]
		switch {
		case class == "" && defaultClass == "":
			p.block("storageclass (default)", "%s the default storage class, and the target has none: mark one default or map them (e.g. %s)", claimsUse(len(claims)), claims[0])
		case class != "" && !classes[class]:
			p.block("storageclass "+class, "the target has no storage class %s; %s it (e.g. %s); create it or map it with --storage-class-map %s=OTHER", class, claimsUse(len(claims)), claims[0], class)
		}
	}
	return p.Findings, nil
}

// noProvisioner is the provisioner of classes whose volumes are made by hand (local volumes).
const noProvisioner = "kubernetes.io/no-provisioner"

// A handMadeClaim binds only to a volume someone made (ferry never reuses the source's: its disk
// or share is the source's data), of its class on the target, for one of these reasons.
type handMadeClaim struct {
	Volume
	class string
	why   handMadeReason
}

type handMadeReason int

const (
	noClassClaims     handMadeReason = iota // storageClassName ""
	selectingClaims                         // spec.selector
	staticClassClaims                       // a class of noProvisioner
)

// checkHandMade blocks the claims that only a volume made by hand binds (handMadeClaim) when the
// target has no volume for them: one pre-bound to the claim, or a free one of its class whose
// labels its selector matches (each volume serves one claim). They would wait for ever, and
// their files with them.
func checkHandMade(ctx context.Context, p *Plan, target Clients, claims []handMadeClaim) error {
	if len(claims) == 0 {
		return nil
	}
	volumes, err := target.Dynamic.Resource(persistentVolumesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("target: list persistent volumes: %w", err)
	}
	preBound := map[string]string{} // claim namespace/name -> the class of the volume made for it
	var free []unstructured.Unstructured
	for _, pv := range volumes.Items {
		ns, _, _ := unstructured.NestedString(pv.Object, "spec", "claimRef", "namespace")
		name, _, _ := unstructured.NestedString(pv.Object, "spec", "claimRef", "name")
		uid, _, _ := unstructured.NestedString(pv.Object, "spec", "claimRef", "uid")
		class, _, _ := unstructured.NestedString(pv.Object, "spec", "storageClassName")
		phase, _, _ := unstructured.NestedString(pv.Object, "status", "phase")
		switch {
		case name != "" && uid == "":
			// Pre-bound to the claim to come: one still naming a claim's UID was another's (Released).
			preBound[ns+"/"+name] = class
		case name == "" && phase == "Available":
			free = append(free, pv)
		}
	}
	used := map[int]bool{}
	lacking := map[handMadeReason]map[string][]string{} // by reason and class
	// Claims that select their volume first: one that selects none may take any.
	slices.SortStableFunc(claims, func(a, b handMadeClaim) int {
		return cmp.Compare(boolRank(a.Selector == nil), boolRank(b.Selector == nil))
	})
	for _, c := range claims {
		if class, ok := preBound[p.Config.MapNamespace(c.Namespace)+"/"+c.Name]; ok && class == c.class {
			continue
		}
		selector := labels.Everything()
		if c.Selector != nil {
			if selector, err = metav1.LabelSelectorAsSelector(c.Selector); err != nil {
				selector = labels.Nothing()
			}
		}
		found := false
		for i, pv := range free {
			class, _, _ := unstructured.NestedString(pv.Object, "spec", "storageClassName")
			modes, _, _ := unstructured.NestedStringSlice(pv.Object, "spec", "accessModes")
			mode, _, _ := unstructured.NestedString(pv.Object, "spec", "volumeMode")
			if !used[i] && class == c.class && selector.Matches(labels.Set(pv.GetLabels())) &&
				cmp.Or(mode, "Filesystem") == cmp.Or(c.VolumeMode, "Filesystem") && !slices.ContainsFunc(c.AccessModes, func(m string) bool { return !slices.Contains(modes, m) }) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			if lacking[c.why] == nil {
				lacking[c.why] = map[string][]string{}
			}
			lacking[c.why][c.class] = append(lacking[c.why][c.class], c.Namespace+"/"+c.Name)
		}
	}
	for _, why := range slices.Sorted(maps.Keys(lacking)) {
		for _, class := range slices.Sorted(maps.Keys(lacking[why])) {
			names := lacking[why][class]
			switch why {
			case noClassClaims:
				p.block(`storageclass ""`, `%s no class (storageClassName ""), so only a volume made by hand binds them, and the target has none for them (e.g. %s): map them to a class of the target with --storage-class-map =CLASS, or make their volumes on the target first`,
					claimsUse(len(names)), names[0])
			case selectingClaims:
				p.block("storageclass "+class, "%s a volume by labels (spec.selector), which no provisioner serves, and the target has no free volume of class %s that matches (e.g. %s): make their volumes on the target first",
					claimsSelect(len(names)), class, names[0])
			case staticClassClaims:
				p.block("storageclass "+class, "%s class %s, whose provisioner makes no volumes (%s), and the target has no free volume of it (e.g. %s): make their volumes on the target first, or map them to another class with --storage-class-map %s=OTHER",
					claimsUse(len(names)), class, noProvisioner, names[0], class)
			}
		}
	}
	return nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func claimsSelect(n int) string {
	if n == 1 {
		return "1 claim selects"
	}
	return fmt.Sprintf("%d claims select", n)
}

func claimsUse(n int) string {
	if n == 1 {
		return "1 claim uses"
	}
	return fmt.Sprintf("%d claims use", n)
}
