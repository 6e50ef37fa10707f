package integration

// The independent checker: compares what blue and green hold — objects, files, tables and bucket
// objects — by its own small rules, reading the clusters, the folders of their volumes, the
// databases and the MinIOs directly. It never calls ferry's verify nor any ferry package to
// compare: a bug in ferry's comparison cannot hide a bug in ferry's copy.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// side is one cluster and the testbed's servers that hold its data.
type side struct {
	name    string
	cluster *testbed.Cluster
	mariadb *testbed.MariaDB
	pg      *testbed.PostgreSQL
	minio   *testbed.MinIO
}

// checkScope says what the checker compares: namespaced objects in namespaces (cluster-scoped
// objects always), the claims' files, the schemas, databases and buckets.
type checkScope struct {
	namespaces   []string
	claims       [][2]string // namespace, name
	mysqlSchemas []string
	pgDatabases  []string
	buckets      []string
	// nodePorts are the node ports set by hand ("namespace/service"): kept, all others dropped.
	nodePorts map[string][]int32
	// clusterIPs are the cluster IPs set by hand ("namespace/service"): kept, as "None" is, all
	// others dropped.
	clusterIPs map[string]string
	// storageClassMap is the run's: blue's claims' classes as green's are named.
	storageClassMap map[string]string
}

// zooScope is what the zoo test compares: the zoo and the platform's namespace and data.
func zooScope(z *testbed.Zoo) checkScope {
	s := checkScope{
		namespaces:   append(slices.Clone(z.Namespaces), "kubeflow"),
		mysqlSchemas: z.MySQLSchemas, pgDatabases: z.PostgresDatabases, buckets: z.Buckets,
		nodePorts: z.NodePorts, clusterIPs: z.ClusterIPs, storageClassMap: map[string]string{"gp3": "standard", "nfs-client": "standard"},
	}
	for _, c := range z.Claims {
		s.claims = append(s.claims, [2]string{c.Namespace, c.Name})
	}
	return s
}

// allowance is a documented difference between blue and green: which (a pattern of the
// checker's difference lines) and why it is right.
type allowance struct {
	pattern *regexp.Regexp
	reason  string
}

// allowList is every difference the checker accepts, each with its reason. Anything else is a
// failure of the migration.
var allowList = []allowance{
	{regexp.MustCompile(`^object storage\.k8s\.io/v1 StorageClass standard: only on green$`),
		"green's storage class, which the testbed's provisioner serves; blue's classes map to it (storageClassMap)"},
	{regexp.MustCompile(`^object v1 PersistentVolumeClaim [^ ]+: spec\.storageClassName: blue \(none\), green "standard"$`),
		"a claim without a class gets the cluster's default class from its admission (DefaultStorageClass), as any new claim there does"},
	{regexp.MustCompile(`^object apps/v1 DaemonSet [^ ]+: metadata\.annotations\.deprecated\.daemonset\.template\.generation: blue "\d+", green "\d+"$`),
		"the API server sets it to the DaemonSet's generation, which counts the updates each cluster saw (1 when created)"},
	{regexp.MustCompile(`^object batch/v1 Job zoo-apps/seed: only on blue$`),
		"a Job that finished stays where it ran: made on green, it would run again (the zoo's seed Job finishes on blue before the migration)"},
	{regexp.MustCompile(`^volume zoo-data/data-zoo-(mariadb|postgres)-0: "\./": mode: blue [-a-zA-Z]+, green [-a-zA-Z]+$`),
		"a database's claim moves as the database's dump, not as files: its root folder is as green's provisioner made it (its files are compared, and its rows)"},
}

// skippedTypes are resources the checker does not compare, and why: the cluster makes them
// itself, or they are compared through what makes them.
var skippedTypes = map[string]string{
	"nodes":                            "nodes belong to each cluster",
	"events":                           "a record of each cluster's past",
	"events.events.k8s.io":             "a record of each cluster's past",
	"leases.coordination.k8s.io":       "held by each cluster's processes",
	"persistentvolumes":                "green's volumes are new ones; their contents are compared file by file",
	"componentstatuses":                "each cluster's control plane",
	"csinodes.storage.k8s.io":          "each cluster's nodes",
	"volumeattachments.storage.k8s.io": "each cluster's nodes",
	"certificatesigningrequests.certificates.k8s.io": "bound to each cluster's signers",
	"ipaddresses.networking.k8s.io":                  "service IPs are allocated by each cluster",
	"servicecidrs.networking.k8s.io":                 "each cluster's configuration",
	"apiservices.apiregistration.k8s.io":             "registered by each API server",
	"clustertrustbundles.certificates.k8s.io":        "published by each API server",
}

// checkDifferences compares blue with green within scope and returns the differences, one line each.
func checkDifferences(t *testing.T, blue, green side, scope checkScope) []string {
	t.Helper()
	ctx := context.Background()
	var diffs []string
	diffs = append(diffs, compareObjects(t, ctx, blue, green, scope)...)
	diffs = append(diffs, compareFiles(t, ctx, blue, green, scope)...)
	diffs = append(diffs, compareMySQL(t, ctx, blue, green, scope.mysqlSchemas)...)
	diffs = append(diffs, comparePostgres(t, ctx, blue, green, scope.pgDatabases)...)
	diffs = append(diffs, compareBuckets(t, ctx, blue, green, scope.buckets)...)
	return diffs
}

// requireSame runs the checker and fails the test for every difference not on the allow-list;
// allowed ones are logged with their reasons. It returns the failing differences.
func requireSame(t *testing.T, when string, blue, green side, scope checkScope) []string {
	t.Helper()
	var failing []string
	for _, d := range checkDifferences(t, blue, green, scope) {
		if a := allowedBy(d); a != nil {
			t.Logf("%s: allowed difference: %s (%s)", when, d, a.reason)
			continue
		}
		failing = append(failing, d)
	}
	for _, d := range failing {
		t.Errorf("%s: %s", when, d)
	}
	t.Logf("%s: %d differences beyond the allow-list", when, len(failing))
	return failing
}

func allowedBy(diff string) *allowance {
	for i := range allowList {
		if allowList[i].pattern.MatchString(diff) {
			return &allowList[i]
		}
	}
	return nil
}

// --- objects

type listedType struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	custom     bool // served by a CRD: its objects' status is compared too
}

// listableTypes are the cluster's preferred versions of the resources that can be listed.
func listableTypes(t *testing.T, s side) ([]listedType, []string) {
	t.Helper()
	cfg, err := s.cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lists, err := dc.ServerPreferredResources()
	var problems []string
	if err != nil {
		problems = append(problems, fmt.Sprintf("discovery on %s: %v", s.name, err))
	}
	_, dyn, err := s.cluster.Clients()
	if err != nil {
		t.Fatal(err)
	}
	custom := map[string]bool{}
	crds, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		problems = append(problems, fmt.Sprintf("list CRDs on %s: %v", s.name, err))
	} else {
		for _, crd := range crds.Items {
			custom[crd.GetName()] = true // named plural.group
		}
	}
	var out []listedType
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			gr := r.Name
			if gv.Group != "" {
				gr += "." + gv.Group
			}
			if skippedTypes[gr] != "" || strings.HasSuffix(gv.Group, "kwok.x-k8s.io") {
				continue
			}
			out = append(out, listedType{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced, custom: custom[gr]})
		}
	}
	return out, problems
}

func compareObjects(t *testing.T, ctx context.Context, blue, green side, scope checkScope) []string {
	t.Helper()
	types, diffs := listableTypes(t, blue)
	greenTypes, more := listableTypes(t, green)
	diffs = append(diffs, more...)
	served := map[string]bool{}
	for _, lt := range greenTypes {
		served[lt.gvr.String()] = true
	}
	_, bdyn, err := blue.cluster.Clients()
	if err != nil {
		t.Fatal(err)
	}
	_, gdyn, err := green.cluster.Clients()
	if err != nil {
		t.Fatal(err)
	}
	for _, lt := range types {
		b, err := listObjects(ctx, bdyn, lt, scope.namespaces)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("list %s on blue: %v", lt.gvr, err))
			continue
		}
		if !served[lt.gvr.String()] {
			if len(b) > 0 {
				diffs = append(diffs, fmt.Sprintf("type %s (%d objects on blue) is not served on green", lt.gvr, len(b)))
			}
			continue
		}
		g, err := listObjects(ctx, gdyn, lt, scope.namespaces)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("list %s on green: %v", lt.gvr, err))
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(joinKeys(b, g))) {
			what := "object " + id
			bo, inBlue := b[id]
			gobj, inGreen := g[id]
			switch {
			case !inGreen:
				diffs = append(diffs, what+": only on blue")
			case !inBlue:
				diffs = append(diffs, what+": only on green")
			default:
				bn, gn := normalize(bo, scope, true), normalize(gobj, scope, false)
				if lt.custom {
					// A custom resource's status is what its controller did, as a finished
					// training job or workflow: lost, the controller does it again.
					for _, pair := range []struct {
						norm map[string]any
						obj  *unstructured.Unstructured
					}{{bn, bo}, {gn, gobj}} {
						if st, ok := pair.obj.Object["status"]; ok {
							pair.norm["status"] = runtime.DeepCopyJSONValue(st)
						}
					}
				}
				quiesced(bn, gn)
				fittedClaim(bn, gn)
				secret := bo.GetKind() == "Secret"
				for _, d := range diffValues("", bn, gn, secret) {
					diffs = append(diffs, what+": "+d)
				}
			}
		}
	}
	return diffs
}

func joinKeys[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// listObjects lists a type (in the scope's namespaces when namespaced), keyed by
// "apiVersion Kind namespace/name", leaving out what each cluster makes for itself.
func listObjects(ctx context.Context, dyn dynamic.Interface, lt listedType, namespaces []string) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	var lists []*unstructured.UnstructuredList
	if lt.namespaced {
		for _, ns := range namespaces {
			l, err := dyn.Resource(lt.gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			lists = append(lists, l)
		}
	} else {
		l, err := dyn.Resource(lt.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		lists = append(lists, l)
	}
	for _, l := range lists {
		for i := range l.Items {
			o := &l.Items[i]
			if clusterMade(lt.gvr.Resource, o) {
				continue
			}
			name := o.GetName()
			if o.GetNamespace() != "" {
				name = o.GetNamespace() + "/" + name
			}
			out[o.GetAPIVersion()+" "+o.GetKind()+" "+name] = o
		}
	}
	return out, nil
}

// clusterMade says whether each cluster makes this object for itself (so it is not compared).
func clusterMade(resource string, o *unstructured.Unstructured) bool {
	switch o.GetNamespace() {
	case "kube-system", "kube-public", "kube-node-lease":
		return true // what each cluster runs for itself, set up for it: it stays
	}
	switch resource {
	case "configmaps":
		return o.GetName() == "kube-root-ca.crt"
	case "secrets":
		typ, _, _ := unstructured.NestedString(o.Object, "type")
		return typ == "bootstrap.kubernetes.io/token"
	case "endpoints":
		// Made from a Service's selector and pods; those written by hand are compared.
		return o.GetLabels()["endpoints.kubernetes.io/managed-by"] == "endpoint-controller" || (o.GetNamespace() == "default" && o.GetName() == "kubernetes")
	case "endpointslices":
		// Made from Services and pods, or mirrored from Endpoints (compared themselves), or the
		// API server's own.
		if o.GetNamespace() == "default" && o.GetName() == "kubernetes" {
			return true
		}
		switch o.GetLabels()["endpointslice.kubernetes.io/managed-by"] {
		case "endpointslice-controller.k8s.io", "endpointslicemirroring-controller.k8s.io":
			return true
		}
	case "services":
		return o.GetNamespace() == "default" && o.GetName() == "kubernetes"
	case "pods":
		// Made by their controllers (their templates are compared on the workloads, ReplicaSets
		// and ControllerRevisions), by a node's kubelet (mirror pods), or by ferry for one copy
		// of a volume; a finished pod is history. Pods run by hand are compared.
		for _, ref := range o.GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller {
				return true
			}
		}
		phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
		_, mirror := o.GetAnnotations()["kubernetes.io/config.mirror"]
		return mirror || phase == "Succeeded" || phase == "Failed" || o.GetLabels()["app.kubernetes.io/name"] == "ferry-mover"
	case "namespaces":
		switch o.GetName() {
		case "default", "kube-system", "kube-public", "kube-node-lease":
			return true
		}
	}
	return false
}

// normalize drops what each cluster sets for itself: identity, versions, times, field managers,
// status, service IPs, node ports nobody chose, a claim's volume; blue's storage classes are
// renamed as the run maps them.
func normalize(o *unstructured.Unstructured, scope checkScope, isBlue bool) map[string]any {
	m := o.DeepCopy().Object
	meta, _ := m["metadata"].(map[string]any)
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink"} {
		delete(meta, f)
	}
	if refs, ok := meta["ownerReferences"].([]any); ok {
		for _, r := range refs {
			if rm, ok := r.(map[string]any); ok {
				delete(rm, "uid")
			}
		}
	}
	delete(m, "status")
	ann, _ := meta["annotations"].(map[string]any)
	mapClass := func(v any) any {
		if s, ok := v.(string); ok && isBlue && scope.storageClassMap[s] != "" {
			return scope.storageClassMap[s]
		}
		return v
	}
	switch o.GetKind() {
	case "Service":
		spec, _ := m["spec"].(map[string]any)
		// A headless Service's "None" is its maker's choice, as an IP set by hand is.
		if ip := scope.clusterIPs[o.GetNamespace()+"/"+o.GetName()]; spec["clusterIP"] != "None" && (ip == "" || spec["clusterIP"] != ip) {
			delete(spec, "clusterIP")
			delete(spec, "clusterIPs")
		}
		explicit := scope.nodePorts[o.GetNamespace()+"/"+o.GetName()]
		if ports, ok := spec["ports"].([]any); ok {
			for _, p := range ports {
				pm, _ := p.(map[string]any)
				if np, ok := pm["nodePort"].(int64); ok && !slices.Contains(explicit, int32(np)) {
					delete(pm, "nodePort")
				}
			}
		}
		if hc, ok := spec["healthCheckNodePort"].(int64); ok && !slices.Contains(explicit, int32(hc)) {
			delete(spec, "healthCheckNodePort")
		}
	case "PersistentVolumeClaim":
		spec, _ := m["spec"].(map[string]any)
		delete(spec, "volumeName")
		if v, ok := spec["storageClassName"]; ok {
			spec["storageClassName"] = mapClass(v)
		}
		for _, a := range []string{"pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller",
			"volume.beta.kubernetes.io/storage-provisioner", "volume.kubernetes.io/storage-provisioner", "volume.kubernetes.io/selected-node"} {
			delete(ann, a)
		}
	case "StatefulSet":
		spec, _ := m["spec"].(map[string]any)
		if vcts, ok := spec["volumeClaimTemplates"].([]any); ok {
			for _, v := range vcts {
				vm, _ := v.(map[string]any)
				if vs, ok := vm["spec"].(map[string]any); ok {
					if c, ok := vs["storageClassName"]; ok {
						vs["storageClassName"] = mapClass(c)
					}
				}
				delete(vm, "status")
			}
		}
	case "ClusterRole":
		// An aggregated role's rules are filled in by each cluster's controller from the roles
		// that aggregate into it, which are compared themselves.
		if _, ok := m["aggregationRule"]; ok {
			delete(m, "rules")
		}
	case "Secret":
		// A service account token is filled by each cluster's token controller, for its account.
		if typ, _ := m["type"].(string); typ == "kubernetes.io/service-account-token" {
			data, _ := m["data"].(map[string]any)
			for _, k := range []string{"token", "ca.crt", "namespace"} {
				delete(data, k)
			}
			delete(ann, "kubernetes.io/service-account.uid")
			// Each API server's record of the token's use.
			labels, _ := meta["labels"].(map[string]any)
			delete(labels, "kubernetes.io/legacy-token-last-used")
			delete(labels, "kubernetes.io/legacy-token-invalid-since")
			if len(labels) == 0 {
				delete(meta, "labels")
			}
		}
	case "Pod":
		spec, _ := m["spec"].(map[string]any)
		// Each cluster's scheduler places it; a debugging session (kubectl debug) ran on blue's
		// node for the one who started it, and a pod is only ever made without one.
		delete(spec, "nodeName")
		delete(spec, "ephemeralContainers")
		// Admission gives each pod a token volume of a random name, kube-api-access-xxxxx.
		if vols, ok := spec["volumes"].([]any); ok {
			spec["volumes"] = slices.DeleteFunc(vols, func(v any) bool {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
				return strings.HasPrefix(name, "kube-api-access-")
			})
		}
		initContainers, _ := spec["initContainers"].([]any)
		containers, _ := spec["containers"].([]any)
		for _, c := range slices.Concat(initContainers, containers) {
			cm := c.(map[string]any)
			if mounts, ok := cm["volumeMounts"].([]any); ok {
				cm["volumeMounts"] = slices.DeleteFunc(mounts, func(v any) bool {
					name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
					return strings.HasPrefix(name, "kube-api-access-")
				})
			}
		}
	case "ReplicaSet":
		// Follows its Deployment's replicas, compared there.
		delete(m["spec"].(map[string]any), "replicas")
		delete(ann, "deployment.kubernetes.io/desired-replicas")
		delete(ann, "deployment.kubernetes.io/max-replicas")
	}
	if len(ann) == 0 {
		delete(meta, "annotations")
	}
	return m
}

// quiescedAnnotation is ferry's record on a writer it stopped: blue's writers stay stopped after
// the cutover, green's after a rollback, so their replicas (or suspend) differ by design.
const quiescedAnnotation = "ferry.dev/quiesced"

func quiesced(a, b map[string]any) {
	q := func(m map[string]any) bool {
		ann, _, _ := unstructured.NestedMap(m, "metadata", "annotations")
		_, ok := ann[quiescedAnnotation]
		return ok
	}
	if !q(a) && !q(b) {
		return
	}
	for _, m := range []map[string]any{a, b} {
		undoAnnotations(m)
		unstructured.RemoveNestedField(m, "metadata", "annotations", quiescedAnnotation)
		if ann, _, _ := unstructured.NestedMap(m, "metadata", "annotations"); len(ann) == 0 {
			unstructured.RemoveNestedField(m, "metadata", "annotations")
		}
		unstructured.RemoveNestedField(m, "spec", "replicas")
		unstructured.RemoveNestedField(m, "spec", "suspend")
		withoutMoversCondition(m)
	}
}

// fittedAnnotation is ferry's record on a claim it made larger than the backup's, so that the
// volume holds its files: {"requested": the backup's request, "fitted": the one it gave}.
const fittedAnnotation = "ferry.dev/fitted-storage"

// fittedClaim takes a claim that carries ferry's record of a larger request for the one it
// records, as long as the record holds: the claim still requests what it was given, and the other
// cluster's claim what the record says it had. compareFiles checks that the volume holds the files.
func fittedClaim(a, b map[string]any) {
	for _, pair := range [][2]map[string]any{{a, b}, {b, a}} {
		fitted, other := pair[0], pair[1]
		record, ok, _ := unstructured.NestedString(fitted, "metadata", "annotations", fittedAnnotation)
		if !ok {
			continue
		}
		var r struct{ Requested, Fitted string }
		now, _, _ := unstructured.NestedString(fitted, "spec", "resources", "requests", "storage")
		was, _, _ := unstructured.NestedString(other, "spec", "resources", "requests", "storage")
		if json.Unmarshal([]byte(record), &r) != nil || now != r.Fitted || was != r.Requested {
			continue
		}
		unstructured.RemoveNestedField(fitted, "metadata", "annotations", fittedAnnotation)
		if ann, _, _ := unstructured.NestedMap(fitted, "metadata", "annotations"); len(ann) == 0 {
			unstructured.RemoveNestedField(fitted, "metadata", "annotations")
		}
		unstructured.SetNestedField(fitted, was, "spec", "resources", "requests", "storage")
	}
}

// moversCondition names the match condition by which the quiesce lets ferry's mover pods pass a
// webhook whose server it stopped: blue's stays after the cutover, green's after a rollback.
const moversCondition = "ferry.dev/movers-pass-while-server-stopped"

func withoutMoversCondition(m map[string]any) {
	webhooks, _, _ := unstructured.NestedSlice(m, "webhooks")
	for _, w := range webhooks {
		webhook, _ := w.(map[string]any)
		conditions, _ := webhook["matchConditions"].([]any)
		conditions = slices.DeleteFunc(conditions, func(c any) bool {
			condition, _ := c.(map[string]any)
			return condition["name"] == moversCondition
		})
		if len(conditions) == 0 {
			delete(webhook, "matchConditions")
		} else {
			webhook["matchConditions"] = conditions
		}
	}
	if webhooks != nil {
		m["webhooks"] = webhooks
	}
}

// undoAnnotations puts back in m what the annotations of an annotate quiesce rule changed, from
// the record's "undo" merge patch (a Notebook stopped on blue keeps the notebook controller's stop
// annotation after the cutover, by design).
func undoAnnotations(m map[string]any) {
	ann, _, _ := unstructured.NestedStringMap(m, "metadata", "annotations")
	var record struct {
		Undo struct {
			Metadata struct {
				Annotations map[string]*string `json:"annotations"`
			} `json:"metadata"`
		} `json:"undo"`
	}
	if json.Unmarshal([]byte(ann[quiescedAnnotation]), &record) != nil {
		return
	}
	for k, v := range record.Undo.Metadata.Annotations {
		if v == nil {
			unstructured.RemoveNestedField(m, "metadata", "annotations", k)
		} else {
			unstructured.SetNestedField(m, *v, "metadata", "annotations", k)
		}
	}
}

// diffValues lists where a and b differ, by path; secret values are never shown.
func diffValues(path string, a, b any, secret bool) []string {
	if reflect.DeepEqual(a, b) {
		return nil
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(joinKeys(am, bm))) {
			out = append(out, diffValues(path+"."+k, am[k], bm[k], secret)...)
		}
		return out
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		var out []string
		for i := range al {
			out = append(out, diffValues(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], secret)...)
		}
		return out
	}
	if secret {
		return []string{strings.TrimPrefix(path, ".") + ": differs (a Secret's values are not shown)"}
	}
	return []string{fmt.Sprintf("%s: blue %s, green %s", strings.TrimPrefix(path, "."), short(a), short(b))}
}

func short(v any) string {
	if v == nil {
		return "(none)"
	}
	data, _ := json.Marshal(v)
	if len(data) > 160 {
		return string(data[:160]) + "..."
	}
	return string(data)
}

// --- files

// fileEntry is what the checker compares of a file.
type fileEntry struct {
	kind     string // dir, file, symlink, fifo, other
	mode     fs.FileMode
	uid, gid uint32
	size     int64
	mtime    int64 // nanoseconds
	sha      string
	target   string
	links    string // the other names of the inode, for files with more than one
	sparse   bool   // fewer blocks than half its size
	takes    int64  // the bytes of the blocks it takes on this machine's file system
	inode    uint64
	nlink    uint64
	// xattrs are a file's or folder's extended attributes that are its data (a user's, POSIX
	// ACLs, file capabilities; not a security module's label): sorted name=SHA-256 of the value.
	xattrs string
}

// walkClaim lists a claim's folder through its root, each path from its directory: a tree
// deeper than PATH_MAX is listed as any other.
func walkClaim(dir string) (map[string]*fileEntry, error) {
	out := map[string]*fileEntry{}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	var walk func(rel string) error
	walk = func(rel string) error {
		d, err := root.Open(rel)
		if err != nil {
			return err
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return err
		}
		for _, name := range names {
			p := path.Join(rel, name)
			info, err := root.Lstat(p)
			if err != nil {
				return err
			}
			st := info.Sys().(*syscall.Stat_t)
			e := &fileEntry{mode: info.Mode(), uid: st.Uid, gid: st.Gid, mtime: st.Mtim.Nano(), inode: st.Ino, nlink: uint64(st.Nlink), takes: st.Blocks * 512}
			switch {
			case info.IsDir():
				e.kind = "dir"
				e.xattrs, err = fileXattrs(root, p)
			case info.Mode()&fs.ModeSymlink != 0:
				e.kind = "symlink"
				e.target, err = root.Readlink(p)
			case info.Mode()&fs.ModeNamedPipe != 0:
				e.kind = "fifo"
			case info.Mode().IsRegular():
				e.kind, e.size = "file", info.Size()
				e.sparse = info.Size() > 64<<10 && st.Blocks*512 < info.Size()/2
				if e.sha, err = hashFile(root, p); err == nil {
					e.xattrs, err = fileXattrs(root, p)
				}
			default:
				e.kind = "other " + info.Mode().Type().String()
			}
			out[p] = e
			if err == nil && e.kind == "dir" {
				err = walk(p)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	err = walk(".")
	// The root folder itself: its mode, owner and extended attributes (its time is its
	// children's to change).
	info, serr := root.Lstat(".")
	if serr == nil {
		st := info.Sys().(*syscall.Stat_t)
		e := &fileEntry{kind: "dir", mode: info.Mode(), uid: st.Uid, gid: st.Gid}
		e.xattrs, serr = fileXattrs(root, ".")
		out["./"] = e
	}
	err = errors.Join(err, serr)
	groups := map[uint64][]string{}
	for p, e := range out {
		if e.kind == "file" && e.nlink > 1 {
			groups[e.inode] = append(groups[e.inode], p)
		}
	}
	for _, names := range groups {
		sort.Strings(names)
		for _, p := range names {
			out[p].links = fmt.Sprintf("%q", names)
		}
	}
	return out, err
}

// fileXattrs lists the extended attributes of file or folder p that are its data.
func fileXattrs(root *os.Root, p string) (string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n, err := unix.Flistxattr(int(f.Fd()), buf)
	if err != nil {
		return "", fmt.Errorf("%s: extended attributes: %w", p, err)
	}
	var out []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") && name != "system.posix_acl_access" && name != "system.posix_acl_default" && name != "security.capability" {
			continue
		}
		value := make([]byte, 64<<10)
		m, err := unix.Fgetxattr(int(f.Fd()), name, value)
		if err != nil {
			return "", fmt.Errorf("%s: extended attribute %s: %w", p, name, err)
		}
		sum := sha256.Sum256(value[:m])
		out = append(out, name+"="+hex.EncodeToString(sum[:8]))
	}
	sort.Strings(out)
	return strings.Join(out, " "), nil
}

func hashFile(root *os.Root, p string) (string, error) {
	f, err := root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func compareFiles(t *testing.T, ctx context.Context, blue, green side, scope checkScope) []string {
	t.Helper()
	var diffs []string
	for _, c := range scope.claims {
		what := "volume " + c[0] + "/" + c[1]
		walk := func(s side, kcName string) (map[string]*fileEntry, int64, string) {
			kc, _, _ := s.cluster.Clients()
			pvc, err := kc.CoreV1().PersistentVolumeClaims(c[0]).Get(ctx, c[1], metav1.GetOptions{})
			if err != nil || pvc.Spec.VolumeName == "" {
				return nil, 0, fmt.Sprintf("%s: not bound on %s (%v)", what, kcName, err)
			}
			pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
			if err != nil || pv.Spec.HostPath == nil {
				return nil, 0, fmt.Sprintf("%s: volume %s on %s: %v", what, pvc.Spec.VolumeName, kcName, err)
			}
			files, err := walkClaim(pv.Spec.HostPath.Path)
			if err != nil {
				return nil, 0, fmt.Sprintf("%s: walk its folder on %s: %v", what, kcName, err)
			}
			capacity := pv.Spec.Capacity[corev1.ResourceStorage]
			return files, capacity.Value(), ""
		}
		b, _, problem := walk(blue, "blue")
		if problem != "" {
			diffs = append(diffs, problem)
			continue
		}
		g, capacity, problem := walk(green, "green")
		if problem != "" {
			diffs = append(diffs, problem)
			continue
		}
		// green's volumes are made as large as their claims request, as a cloud disk is: blue's,
		// whose size the testbed never enforces, may hold more than theirs request.
		var takes int64
		for _, e := range g {
			takes += max(e.takes, 4096)
		}
		if capacity < takes {
			diffs = append(diffs, fmt.Sprintf("%s: green's volume of %d bytes is too small for the %d its files take", what, capacity, takes))
		}
		for _, p := range slices.Sorted(maps.Keys(joinKeys(b, g))) {
			name := fmt.Sprintf("%s: %q", what, p)
			be, ge := b[p], g[p]
			switch {
			case ge == nil:
				diffs = append(diffs, name+": only on blue")
				continue
			case be == nil:
				diffs = append(diffs, name+": only on green")
				continue
			}
			for _, f := range []struct {
				field    string
				bv, gv   any
				hideVals bool
			}{
				{"type", be.kind, ge.kind, false},
				{"mode", be.mode, ge.mode, false},
				{"owner", fmt.Sprintf("%d:%d", be.uid, be.gid), fmt.Sprintf("%d:%d", ge.uid, ge.gid), false},
				{"size", be.size, ge.size, false},
				{"mtime", be.mtime, ge.mtime, false},
				{"SHA-256", be.sha, ge.sha, true},
				{"link target", be.target, ge.target, false},
				{"hardlinks", be.links, ge.links, false},
				{"sparse", be.sparse, ge.sparse && be.sparse, false},
				{"extended attributes", be.xattrs, ge.xattrs, false},
			} {
				if f.bv == f.gv {
					continue
				}
				if f.hideVals {
					diffs = append(diffs, name+": "+f.field+" differs")
				} else {
					diffs = append(diffs, fmt.Sprintf("%s: %s: blue %v, green %v", name, f.field, f.bv, f.gv))
				}
			}
		}
	}
	return diffs
}

// --- tables

// mysqlFacts reads what the checker compares of a MariaDB schema, one line per fact: each table's
// row count and CHECKSUM TABLE, each view's, routine's and trigger's definition (by MD5).
func mysqlFacts(ctx context.Context, s side, schema string) (map[string]string, error) {
	q := func(sql string) ([]string, error) {
		out, err := s.mariadb.SQL(ctx, tb.Bins, sql)
		if err != nil {
			return nil, err
		}
		return strings.FieldsFunc(out, func(r rune) bool { return r == '\n' }), nil
	}
	facts := map[string]string{}
	lit := "'" + schema + "'"
	tables, err := q("SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = " + lit)
	if err != nil {
		return nil, err
	}
	for _, line := range tables {
		name, typ, _ := strings.Cut(line, "\t")
		if typ != "BASE TABLE" {
			continue
		}
		full := "`" + schema + "`.`" + name + "`"
		rows, err := q("SELECT COUNT(*) FROM " + full)
		if err != nil {
			return nil, err
		}
		sum, err := q("CHECKSUM TABLE " + full)
		if err != nil {
			return nil, err
		}
		facts["table "+schema+"."+name+" rows"] = strings.Join(rows, "")
		facts["table "+schema+"."+name+" checksum"] = strings.Join(sum, "")
	}
	for _, c := range []struct{ what, sql string }{
		{"view", "SELECT table_name, MD5(view_definition) FROM information_schema.views WHERE table_schema = " + lit},
		{"routine", "SELECT CONCAT(routine_type, ' ', routine_name), MD5(CONCAT_WS('|', routine_definition, data_type, sql_data_access, security_type)) FROM information_schema.routines WHERE routine_schema = " + lit},
		{"trigger", "SELECT trigger_name, MD5(CONCAT_WS('|', event_manipulation, action_timing, event_object_table, action_statement)) FROM information_schema.triggers WHERE trigger_schema = " + lit},
	} {
		lines, err := q(c.sql)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			k, v, _ := strings.Cut(l, "\t")
			facts[c.what+" "+schema+"."+k] = v
		}
	}
	return facts, nil
}

func compareMySQL(t *testing.T, ctx context.Context, blue, green side, schemas []string) []string {
	t.Helper()
	var diffs []string
	for _, schema := range schemas {
		b, err := mysqlFacts(ctx, blue, schema)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("MariaDB schema %s on blue: %v", schema, err))
			continue
		}
		g, err := mysqlFacts(ctx, green, schema)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("MariaDB schema %s on green: %v", schema, err))
			continue
		}
		diffs = append(diffs, compareFacts("MariaDB", b, g)...)
	}
	return diffs
}

func compareFacts(engine string, b, g map[string]string) []string {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(joinKeys(b, g))) {
		bv, inB := b[k]
		gv, inG := g[k]
		switch {
		case !inG:
			diffs = append(diffs, engine+" "+k+": only on blue")
		case !inB:
			diffs = append(diffs, engine+" "+k+": only on green")
		case bv != gv:
			diffs = append(diffs, fmt.Sprintf("%s %s: blue %s, green %s", engine, k, bv, gv))
		}
	}
	return diffs
}

// pgFacts reads what the checker compares of a PostgreSQL database: each table's row count and the
// MD5 of its rows in order, each view's, function's and trigger's definition, each sequence's value,
// each large object's contents.
func pgFacts(ctx context.Context, s side, db string) (map[string]string, error) {
	q := func(sql string) ([]string, error) {
		out, err := s.pg.SQL(ctx, tb.Bins, db, sql)
		if err != nil {
			return nil, err
		}
		return strings.FieldsFunc(out, func(r rune) bool { return r == '\n' }), nil
	}
	exists, err := s.pg.SQL(ctx, tb.Bins, "postgres", "SELECT count(*) FROM pg_database WHERE datname = '"+db+"'")
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(exists) == "0" {
		return map[string]string{}, nil
	}
	facts := map[string]string{}
	tables, err := q("SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')")
	if err != nil {
		return nil, err
	}
	for _, tbl := range tables {
		rows, err := q("SELECT count(*) || ' rows, md5 ' || md5(coalesce(string_agg(t::text, E'\\n' ORDER BY t::text), '')) FROM " + tbl + " t")
		if err != nil {
			return nil, err
		}
		facts["table "+db+"."+tbl] = strings.Join(rows, "")
	}
	for _, c := range []struct{ what, sql string }{
		{"view", "SELECT schemaname || '.' || viewname || '|' || md5(definition) FROM pg_views WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"},
		{"function", "SELECT n.nspname || '.' || p.proname || '|' || md5(pg_get_functiondef(p.oid)) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')"},
		{"trigger", "SELECT tgrelid::regclass::text || '.' || tgname || '|' || md5(pg_get_triggerdef(oid)) FROM pg_trigger WHERE NOT tgisinternal"},
		{"sequence", "SELECT schemaname || '.' || sequencename || '|' || coalesce(last_value::text, 'unused') FROM pg_sequences"},
		{"large object", "SELECT oid::text || '|' || md5(lo_get(oid)) FROM pg_largeobject_metadata"},
	} {
		lines, err := q(c.sql)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			k, v, _ := strings.Cut(l, "|")
			facts[c.what+" "+db+"."+k] = v
		}
	}
	return facts, nil
}

func comparePostgres(t *testing.T, ctx context.Context, blue, green side, dbs []string) []string {
	t.Helper()
	var diffs []string
	for _, db := range dbs {
		b, err := pgFacts(ctx, blue, db)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("PostgreSQL database %s on blue: %v", db, err))
			continue
		}
		g, err := pgFacts(ctx, green, db)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("PostgreSQL database %s on green: %v", db, err))
			continue
		}
		if len(b) == 0 {
			diffs = append(diffs, "PostgreSQL database "+db+": not on blue")
		}
		diffs = append(diffs, compareFacts("PostgreSQL", b, g)...)
	}
	return diffs
}

// --- buckets

// bucketFacts lists a bucket with minio-go: each key's size, SHA-256 of its bytes and tags.
func bucketFacts(ctx context.Context, m *testbed.MinIO, bucket string) (map[string]string, error) {
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		return nil, err
	}
	mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, "")})
	if err != nil {
		return nil, err
	}
	if ok, err := mc.BucketExists(ctx, bucket); err != nil || !ok {
		return nil, fmt.Errorf("no bucket %s (%v)", bucket, err)
	}
	out := map[string]string{}
	for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			return nil, o.Err
		}
		obj, err := mc.GetObject(ctx, bucket, o.Key, minio.GetObjectOptions{})
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(h, obj)
		var info minio.ObjectInfo
		if err == nil {
			info, err = obj.Stat()
		}
		obj.Close()
		if err != nil {
			return nil, fmt.Errorf("read a key of %d bytes: %w", len(o.Key), err)
		}
		tags, err := mc.GetObjectTagging(ctx, bucket, o.Key, minio.GetObjectTaggingOptions{})
		if err != nil {
			return nil, fmt.Errorf("the tags of a key of %d bytes: %w", len(o.Key), err)
		}
		// How the store keeps it at rest: in clear, SSE-S3, or SSE-KMS under a key of its KMS.
		encryption := strings.TrimSpace(info.Metadata.Get("X-Amz-Server-Side-Encryption") + " " + info.Metadata.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"))
		out[o.Key] = fmt.Sprintf("%d bytes, SHA-256 %s, tags %v, encryption %q", n, hex.EncodeToString(h.Sum(nil)), tags.ToMap(), encryption)
	}
	return out, nil
}

// bucketSettings is what a bucket's settings are, read through the S3 API (not ferry's code):
// each setting as JSON, "" where the bucket has none.
func bucketSettings(t *testing.T, c *s3.Client, bucket string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	js := func(v any) string {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if v, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("bucket %s: versioning: %v", bucket, err)
	} else {
		out["versioning"] = string(v.Status)
	}
	if p, err := c.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String(bucket)}); err == nil {
		var doc any // compared as JSON values: the store may lay the document out its own way
		if err := json.Unmarshal([]byte(aws.ToString(p.Policy)), &doc); err != nil {
			t.Fatalf("bucket %s: policy: %v", bucket, err)
		}
		out["policy"] = js(oneAsValue(doc))
	} else if !strings.Contains(err.Error(), "NoSuchBucketPolicy") {
		t.Fatalf("bucket %s: policy: %v", bucket, err)
	}
	if l, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String(bucket)}); err == nil {
		out["lifecycle"] = js(l.Rules)
	} else if !strings.Contains(err.Error(), "NoSuchLifecycleConfiguration") {
		t.Fatalf("bucket %s: lifecycle: %v", bucket, err)
	}
	if tg, err := c.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(bucket)}); err == nil {
		tags := map[string]string{}
		for _, tag := range tg.TagSet {
			tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
		}
		out["tags"] = js(tags)
	} else if !strings.Contains(err.Error(), "NoSuchTagSet") {
		t.Fatalf("bucket %s: tags: %v", bucket, err)
	}
	// A store without encryption at rest (SeaweedFS, MinIO without a KMS) has none to give.
	if e, err := c.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: aws.String(bucket)}); err == nil {
		out["encryption"] = js(e.ServerSideEncryptionConfiguration.Rules)
	} else if !strings.Contains(err.Error(), "ServerSideEncryptionConfigurationNotFoundError") && !strings.Contains(err.Error(), "NotImplemented") {
		t.Fatalf("bucket %s: encryption: %v", bucket, err)
	}
	if l, err := c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(bucket)}); err == nil {
		out["object lock"] = js(l.ObjectLockConfiguration)
	} else if !strings.Contains(err.Error(), "ObjectLockConfigurationNotFound") {
		t.Fatalf("bucket %s: object lock: %v", bucket, err)
	}
	return out
}

// oneAsValue writes every list of one value in a policy document as the value alone, as the
// policy grammar allows and SeaweedFS writes them ("Action": "s3:GetObject").
func oneAsValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = oneAsValue(e)
		}
	case []any:
		if len(v) == 1 {
			return oneAsValue(v[0])
		}
		for i, e := range v {
			v[i] = oneAsValue(e)
		}
	}
	return v
}

func compareBuckets(t *testing.T, ctx context.Context, blue, green side, buckets []string) []string {
	t.Helper()
	var diffs []string
	for _, bucket := range buckets {
		b, err := bucketFacts(ctx, blue.minio, bucket)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("bucket %s on blue: %v", bucket, err))
			continue
		}
		g, err := bucketFacts(ctx, green.minio, bucket)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("bucket %s on green: %v", bucket, err))
			continue
		}
		bs, gs := bucketSettings(t, blue.minio.S3Client(), bucket), bucketSettings(t, green.minio.S3Client(), bucket)
		for _, setting := range slices.Sorted(maps.Keys(joinKeys(bs, gs))) {
			if bs[setting] != gs[setting] {
				diffs = append(diffs, fmt.Sprintf("bucket %s: %s: blue %s, green %s", bucket, setting, bs[setting], gs[setting]))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(joinKeys(b, g))) {
			name := fmt.Sprintf("bucket %s: key %.100q (%d bytes)", bucket, k, len(k))
			bv, inB := b[k]
			gv, inG := g[k]
			switch {
			case !inG:
				diffs = append(diffs, name+": only on blue")
			case !inB:
				diffs = append(diffs, name+": only on green")
			case bv != gv:
				diffs = append(diffs, fmt.Sprintf("%s: blue %s, green %s", name, bv, gv))
			}
		}
	}
	return diffs
}

// TestCheckerRules checks the checker's own rules, without a testbed: what normalize drops and
// keeps, that a Secret's values never show, and that the file walk sees types, hardlink groups and
// sparse files.
func TestCheckerRules(t *testing.T) {
	scope := checkScope{nodePorts: map[string][]int32{"ns/svc": {30080}}, storageClassMap: map[string]string{"gp3": "standard"}}
	svc := func(clusterIP string, auto int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": "svc", "namespace": "ns", "uid": clusterIP, "resourceVersion": "7"},
			"spec": map[string]any{"clusterIP": clusterIP, "ports": []any{
				map[string]any{"port": int64(80), "nodePort": int64(30080)},
				map[string]any{"port": int64(81), "nodePort": auto},
			}},
			"status": map[string]any{"loadBalancer": map[string]any{}},
		}}
	}
	if d := diffValues("", normalize(svc("10.0.0.1", 31000), scope, true), normalize(svc("10.9.9.9", 32000), scope, false), false); len(d) != 0 {
		t.Errorf("services differing only in IPs, auto node ports and identity: %q", d)
	}
	moved := svc("10.0.0.1", 31000)
	moved.Object["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)["nodePort"] = int64(30999)
	if d := diffValues("", normalize(svc("10.0.0.1", 31000), scope, true), normalize(moved, scope, false), false); len(d) != 1 || !strings.Contains(d[0], "nodePort: blue 30080, green (none)") {
		t.Errorf("an explicit node port that changed: %q, want it named", d)
	}
	if d := diffValues("", normalize(svc("None", 31000), scope, true), normalize(svc("10.9.9.9", 31000), scope, false), false); len(d) == 0 {
		t.Error("a headless Service and one that is not: no difference")
	}

	pvc := func(class, volume string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
			"metadata": map[string]any{"name": "c", "namespace": "ns", "annotations": map[string]any{"pv.kubernetes.io/bind-completed": "yes"}},
			"spec":     map[string]any{"storageClassName": class, "volumeName": volume}}}
	}
	if d := diffValues("", normalize(pvc("gp3", "pv-a"), scope, true), normalize(pvc("standard", "pvc-b"), scope, false), false); len(d) != 0 {
		t.Errorf("a claim mapped from gp3 to standard and bound anew: %q", d)
	}
	if d := diffValues("", normalize(pvc("gp3", "a"), scope, true), normalize(pvc("gp3", "b"), scope, false), false); len(d) != 1 {
		t.Errorf("a claim whose class was not mapped: %q, want one difference", d)
	}

	a := map[string]any{"metadata": map[string]any{"name": "w", "annotations": map[string]any{quiescedAnnotation: "{}"}}, "spec": map[string]any{"replicas": int64(0), "x": "same"}}
	b := map[string]any{"metadata": map[string]any{"name": "w"}, "spec": map[string]any{"replicas": int64(3), "x": "same"}}
	quiesced(a, b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("a quiesced writer and its running copy: %v vs %v", a, b)
	}

	secret := diffValues("", map[string]any{"data": map[string]any{"password": "aHVudGVyMg=="}}, map[string]any{"data": map[string]any{"password": "c2VjcmV0"}}, true)
	if len(secret) != 1 || strings.Contains(secret[0], "aHVudGVyMg") || strings.Contains(secret[0], "c2VjcmV0") {
		t.Errorf("a Secret's difference shows its values: %q", secret)
	}

	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "a"), []byte("x"), 0o644))
	must(os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "b")))
	must(syscall.Mkfifo(filepath.Join(dir, "p"), 0o600))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	must(err)
	must(f.Truncate(8 << 20))
	must(f.Close())
	must(unix.Setxattr(filepath.Join(dir, "a"), "user.origin", []byte("blue"), 0))
	files, err := walkClaim(dir)
	must(err)
	if files["a"].xattrs != "user.origin=16477688c0e00699" || files["sparse"].xattrs != "" {
		t.Errorf("extended attributes of a: %q, of sparse: %q", files["a"].xattrs, files["sparse"].xattrs)
	}
	if files["a"].links != `["a" "b"]` || files["b"].links != files["a"].links {
		t.Errorf("hardlink group of a: %q, of b: %q", files["a"].links, files["b"].links)
	}
	if files["p"].kind != "fifo" || !files["sparse"].sparse || files["sparse"].size != 8<<20 {
		t.Errorf("fifo %+v, sparse %+v", files["p"], files["sparse"])
	}

	facts := compareFacts("MariaDB", map[string]string{"table s.t rows": "3", "view s.v": "x"}, map[string]string{"table s.t rows": "4", "trigger s.g": "y"})
	want := []string{"MariaDB table s.t rows: blue 3, green 4", "MariaDB trigger s.g: only on green", "MariaDB view s.v: only on blue"}
	if !slices.Equal(facts, want) {
		t.Errorf("compareFacts: %q, want %q", facts, want)
	}
}
