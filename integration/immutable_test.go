package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/snapshot"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

const immutableNS = "immutable"

// TestImmutableObjectsAreReplaced: a ConfigMap or Secret marked immutable, a StatefulSet's
// claim templates, a binding's role, a Deployment's or DaemonSet's selector, a Job's template,
// a PriorityClass's value, whether a Service is headless, a storage or ingress class's driver and
// a runtime class's handler change only by being deleted and made again: how a release changes
// one (a chart that renames its labels, a binding given another role), how an operator grows a
// StatefulSet's volumes (and so how green's may change before a carry-back). A restore that
// replaces (--existing replace, as the carry-back does) or updates existing objects makes the
// backup's copy in its place; the API server refuses the write.
func TestImmutableObjectsAreReplaced(t *testing.T) {
	testbed.Require(t, tb)
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, immutableNS, blueKC, greenKC)
	t.Cleanup(func() {
		for _, kc := range []kubernetes.Interface{blueKC, greenKC} {
			kc.SchedulingV1().PriorityClasses().Delete(context.Background(), "immutable-batch", metav1.DeleteOptions{})
			kc.StorageV1().StorageClasses().Delete(context.Background(), "immutable-fast", metav1.DeleteOptions{})
			kc.NetworkingV1().IngressClasses().Delete(context.Background(), "immutable-web", metav1.DeleteOptions{})
			kc.NodeV1().RuntimeClasses().Delete(context.Background(), "immutable-sandbox", metav1.DeleteOptions{})
		}
	})
	objects := func(version, password, size string) string {
		// Green's release: other labels, another role, another priority, which it makes its
		// cluster's default.
		// Its database's Service is no longer headless, its cache's is, its storage and ingress
		// classes are another driver's.
		labels, role, priority, dbIP, cacheIP, reclaim := "{app: web}", "view", "1000", "clusterIP: None", "", "Delete"
		if version != "1" {
			labels, role, priority, dbIP, cacheIP, reclaim = "{app: web, release: \"2\"}", "edit", "2000\nglobalDefault: true", "", "clusterIP: None", "Retain"
		}
		return `apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: immutable-batch}
value: ` + priority + `
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: immutable-fast}
provisioner: example.com/fast-` + version + `
parameters: {tier: "` + version + `"}
reclaimPolicy: ` + reclaim + `
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: immutable-web}
spec: {controller: example.com/ingress-` + version + `}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: immutable-sandbox}
handler: sandbox-` + version + `
---
apiVersion: v1
kind: Namespace
metadata: {name: ` + immutableNS + `}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: flags, namespace: ` + immutableNS + `}
immutable: true
data: {version: "` + version + `"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: ` + immutableNS + `}
immutable: true
stringData: {password: ` + password + `}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: ` + immutableNS + `}
spec:
  replicas: 0
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "registry.example/db:1"}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: ` + size + `}}}
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: ` + immutableNS + `}
spec:
  ` + dbIP + `
  selector: {app: db}
  ports: [{port: 3306}]
---
apiVersion: v1
kind: Service
metadata: {name: cache, namespace: ` + immutableNS + `}
spec:
  ` + cacheIP + `
  selector: {app: cache}
  ports: [{port: 6379}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: readers, namespace: ` + immutableNS + `}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ` + role + `}
subjects: [{kind: ServiceAccount, name: default, namespace: ` + immutableNS + `}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ` + immutableNS + `}
spec:
  replicas: 1
  selector: {matchLabels: ` + labels + `}
  template:
    metadata: {labels: ` + labels + `}
    spec: {containers: [{name: web, image: "registry.example/web:` + version + `"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: ` + immutableNS + `}
spec:
  selector: {matchLabels: ` + labels + `}
  template:
    metadata: {labels: ` + labels + `}
    spec: {containers: [{name: agent, image: "registry.example/agent:` + version + `"}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: nightly, namespace: ` + immutableNS + `}
spec:
  suspend: true
  template:
    spec:
      priorityClassName: immutable-batch
      restartPolicy: Never
      containers: [{name: report, image: "registry.example/report:` + version + `"}]
`
	}
	kubectl(t, "blue", objects("1", "blue-password", "1Gi"), "apply", "-f", "-")
	kubectl(t, "green", objects("2", "green-password", "2Gi"), "apply", "-f", "-")

	store := "file://" + filepath.Join(t.TempDir(), "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, immutableNS), "--name", "immutable"); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	ctx := context.Background()
	for _, policy := range []string{"replace", "update"} {
		kubectl(t, "green", "", "delete", "-n", immutableNS, "configmap/flags", "secret/creds", "statefulset/db", "rolebinding/readers", "deployment/web", "daemonset/agent", "job/nightly", "service/db", "service/cache")
		kubectl(t, "green", "", "delete", "priorityclass/immutable-batch", "storageclass/immutable-fast", "ingressclass/immutable-web", "runtimeclass/immutable-sandbox")
		kubectl(t, "green", objects("2", "green-password", "2Gi"), "apply", "-f", "-")
		if code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", "immutable", "--existing", policy); code != 0 {
			t.Errorf("restore --existing %s exited %d, want 0: %s %+v\nstderr: %s", policy, code, rep.Error, rep.Items, lastLines(errOut, 10))
		}
		if cm, err := greenKC.CoreV1().ConfigMaps(immutableNS).Get(ctx, "flags", metav1.GetOptions{}); err != nil || cm.Data["version"] != "1" || cm.Immutable == nil || !*cm.Immutable {
			t.Errorf("--existing %s: green's ConfigMap flags: %v (immutable %v), %v; want blue's version 1, immutable", policy, cm.Data, cm.Immutable, err)
		}
		if s, err := greenKC.CoreV1().Secrets(immutableNS).Get(ctx, "creds", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "blue-password" {
			t.Errorf("--existing %s: green's Secret creds is not blue's (%v)", policy, err)
		}
		if sts, err := greenKC.AppsV1().StatefulSets(immutableNS).Get(ctx, "db", metav1.GetOptions{}); err != nil || len(sts.Spec.VolumeClaimTemplates) != 1 ||
			sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() != "1Gi" {
			t.Errorf("--existing %s: green's StatefulSet db is not blue's, with claims of 1Gi (%v)", policy, err)
		}
		if rb, err := greenKC.RbacV1().RoleBindings(immutableNS).Get(ctx, "readers", metav1.GetOptions{}); err != nil || rb.RoleRef.Name != "view" {
			t.Errorf("--existing %s: green's RoleBinding readers: %v, %v; want blue's role view", policy, rb.RoleRef, err)
		}
		if d, err := greenKC.AppsV1().Deployments(immutableNS).Get(ctx, "web", metav1.GetOptions{}); err != nil || len(d.Spec.Selector.MatchLabels) != 1 || d.Spec.Template.Spec.Containers[0].Image != "registry.example/web:1" {
			t.Errorf("--existing %s: green's Deployment web is not blue's, selecting app=web (%v)", policy, err)
		}
		if d, err := greenKC.AppsV1().DaemonSets(immutableNS).Get(ctx, "agent", metav1.GetOptions{}); err != nil || len(d.Spec.Selector.MatchLabels) != 1 {
			t.Errorf("--existing %s: green's DaemonSet agent is not blue's, selecting app=web (%v)", policy, err)
		}
		if j, err := greenKC.BatchV1().Jobs(immutableNS).Get(ctx, "nightly", metav1.GetOptions{}); err != nil || j.Spec.Template.Spec.Containers[0].Image != "registry.example/report:1" {
			t.Errorf("--existing %s: green's Job nightly is not blue's (%v)", policy, err)
		}
		if pc, err := greenKC.SchedulingV1().PriorityClasses().Get(ctx, "immutable-batch", metav1.GetOptions{}); err != nil || pc.Value != 1000 || !pc.GlobalDefault {
			t.Errorf("--existing %s: green's PriorityClass immutable-batch: %v; want blue's value 1000, and green's default still", policy, err)
		}
		if svc, err := greenKC.CoreV1().Services(immutableNS).Get(ctx, "db", metav1.GetOptions{}); err != nil || svc.Spec.ClusterIP != "None" {
			t.Errorf("--existing %s: green's Service db is not blue's, headless (%v)", policy, err)
		}
		if svc, err := greenKC.CoreV1().Services(immutableNS).Get(ctx, "cache", metav1.GetOptions{}); err != nil || svc.Spec.ClusterIP == "None" {
			t.Errorf("--existing %s: green's Service cache is not blue's, with a cluster IP (%v)", policy, err)
		}
		if sc, err := greenKC.StorageV1().StorageClasses().Get(ctx, "immutable-fast", metav1.GetOptions{}); err != nil || sc.Provisioner != "example.com/fast-1" ||
			sc.Parameters["tier"] != "1" || sc.ReclaimPolicy == nil || *sc.ReclaimPolicy != "Delete" {
			t.Errorf("--existing %s: green's StorageClass immutable-fast is not blue's (%v)", policy, err)
		}
		if ic, err := greenKC.NetworkingV1().IngressClasses().Get(ctx, "immutable-web", metav1.GetOptions{}); err != nil || ic.Spec.Controller != "example.com/ingress-1" {
			t.Errorf("--existing %s: green's IngressClass immutable-web is not blue's (%v)", policy, err)
		}
		if rc, err := greenKC.NodeV1().RuntimeClasses().Get(ctx, "immutable-sandbox", metav1.GetOptions{}); err != nil || rc.Handler != "sandbox-1" {
			t.Errorf("--existing %s: green's RuntimeClass immutable-sandbox is not blue's (%v)", policy, err)
		}
		// What green's workloads ran before does not run on, unowned or taken for up to date:
		// the old ReplicaSet (green's own history) and pods go.
		var left []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := greenKC.CoreV1().Pods(immutableNS).List(ctx, metav1.ListOptions{LabelSelector: "release=2"})
			if err != nil {
				return false, err
			}
			sets, err := greenKC.AppsV1().ReplicaSets(immutableNS).List(ctx, metav1.ListOptions{LabelSelector: "release=2"})
			if err != nil {
				return false, err
			}
			left = nil
			for _, p := range pods.Items {
				left = append(left, "pod "+p.Name)
			}
			for _, s := range sets.Items {
				left = append(left, "replicaset "+s.Name)
			}
			return len(left) == 0, nil
		})
		if err != nil {
			t.Errorf("--existing %s: what green's release 2 ran is still there after a minute: %s", policy, strings.Join(left, ", "))
		}
		if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "immutable"); code != 0 {
			t.Errorf("--existing %s: verify exited %d\n%s\n%s", policy, code, out, lastLines(errOut, 10))
		}
	}
}

// TestRefusedChangesKeepValuesOut: the API server's refusal of a change it makes only by making
// the object again quotes the object's field, a Job's whole pod template with its environment's
// values, which ferry.yaml marks sensitive. When ferry may not make it again (a finalizer holds
// it), the report says why, and neither it nor the log holds a value of either cluster's
// environment.
func TestRefusedChangesKeepValuesOut(t *testing.T) {
	testbed.Require(t, tb)
	const ns = "refused-values"
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, ns, blueKC, greenKC)
	t.Cleanup(func() {
		kubectl(t, "green", "", "patch", "-n", ns, "job/nightly", "--type", "merge", "-p", `{"metadata":{"finalizers":null}}`)
	})
	job := func(version, token, finalizers string) string {
		return `apiVersion: v1
kind: Namespace
metadata: {name: ` + ns + `}
---
apiVersion: batch/v1
kind: Job
metadata: {name: nightly, namespace: ` + ns + `, finalizers: [` + finalizers + `]}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: report
        image: "registry.example/report:` + version + `"
        env: [{name: TOKEN, value: "` + token + `"}]
`
	}
	const blueToken, greenToken = "blue-token-8d2f61", "green-token-5a90c3"
	kubectl(t, "blue", job("1", blueToken, ""), "apply", "-f", "-")
	kubectl(t, "green", job("2", greenToken, "ferry.test/hold"), "apply", "-f", "-")

	store := "file://" + filepath.Join(t.TempDir(), "store")
	// The environment is marked sensitive: differences name its fields, never their values.
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte("include: {namespaces: ["+ns+"]}\n"+
		`sensitive: [{resource: jobs.batch, paths: ["spec.template.spec.containers[*].env"]}]`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", config, "--name", ns); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runFerry(t, "--storage", store, "restore", "--to", "green", "--backup", ns, "--existing", "update", "-o", "json")
	var rep restoreReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("ferry restore exited %d without a JSON report: %v\n%s\n%s", code, err, out, errOut)
	}
	i := slices.IndexFunc(rep.Items, func(it snapshot.ReportItem) bool { return strings.HasSuffix(it.Name, ns+"/nightly") })
	if code != 3 || i < 0 || rep.Items[i].Status != snapshot.StatusFailed || !strings.Contains(rep.Items[i].Detail, "field is immutable") ||
		!strings.Contains(rep.Items[i].Detail, "finalizers ferry.test/hold") {
		t.Fatalf("restore --existing update exited %d, want 3 with the Job failed, held by its finalizer: %+v\nstderr: %s", code, rep.Items, lastLines(errOut, 10))
	}
	t.Logf("the report's item: %s", rep.Items[i].Detail)
	for _, token := range []string{blueToken, greenToken} {
		if strings.Contains(out, token) || strings.Contains(errOut, token) {
			t.Errorf("the report or the log holds the template's value %s", token)
		}
	}
}

// TestRemakeThatFailsPutsTheTargetsBack: the dry run of a remake's create passes, and the create
// after the delete is refused (an admission policy that lets dry runs through, as a webhook
// may; an operator that made the object again first). The target's object, which the delete
// took, is made again as it was: a failed restore loses nothing of the target's.
func TestRemakeThatFailsPutsTheTargetsBack(t *testing.T) {
	testbed.Require(t, tb)
	const ns = "remake-refused"
	_, blueKC := clients(t, "blue")
	_, greenKC := clients(t, "green")
	removeAfter(t, ns, blueKC, greenKC)
	t.Cleanup(func() {
		kubectl(t, "green", "", "delete", "--ignore-not-found", "validatingadmissionpolicybinding/"+ns, "validatingadmissionpolicy/"+ns)
	})
	secret := func(release, password string) string {
		return `apiVersion: v1
kind: Namespace
metadata: {name: ` + ns + `}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: ` + ns + `, labels: {release: "` + release + `"}}
immutable: true
stringData: {password: ` + password + `}
---
apiVersion: batch/v1
kind: Job
metadata: {name: nightly, namespace: ` + ns + `, labels: {release: "` + release + `"}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{name: report, image: "registry.example/report:` + release + `"}]
`
	}
	kubectl(t, "blue", secret("1", "blue-password"), "apply", "-f", "-")
	kubectl(t, "green", secret("2", "green-password"), "apply", "-f", "-")
	kubectl(t, "green", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: `+ns+`}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [secrets]},
      {apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
  validations:
  - expression: "request.dryRun == true || !has(object.metadata.labels) || !('release' in object.metadata.labels) || object.metadata.labels.release != '1'"
    message: release 1 is not made here
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: `+ns+`}
spec:
  policyName: `+ns+`
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: `+ns+`}}
`, "apply", "-f", "-")

	store := "file://" + filepath.Join(t.TempDir(), "store")
	if code, out, errOut := runFerry(t, "--storage", store, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", ns); code != 0 {
		t.Fatalf("ferry backup exited %d\n%s\n%s", code, out, errOut)
	}
	// The policy takes a moment to be enforced: until a create of release 1 is refused.
	waitUntil(t, "the admission policy enforced", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := greenKC.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{"release": "1"}}}, metav1.CreateOptions{})
		if err == nil {
			greenKC.CoreV1().Secrets(ns).Delete(ctx, "probe", metav1.DeleteOptions{})
		}
		return err != nil, nil
	})
	code, rep, errOut := runReportCommand(t, "--storage", store, "restore", "--to", "green", "--backup", ns, "--existing", "update")
	for _, name := range []string{"Secret " + ns + "/creds", "Job " + ns + "/nightly"} {
		i := slices.IndexFunc(rep.Items, func(it snapshot.ReportItem) bool { return strings.HasSuffix(it.Name, name) })
		if code != 3 || i < 0 || rep.Items[i].Status != snapshot.StatusFailed || !strings.Contains(rep.Items[i].Detail, "release 1 is not made here") ||
			!strings.Contains(rep.Items[i].Detail, "the target's was made again as it was") {
			t.Errorf("restore --existing update exited %d, want 3 with the %s failed, refused by the policy, and green's made again: %+v\nstderr: %s", code, name, rep.Items, lastLines(errOut, 10))
		} else {
			t.Logf("the report's item: %s", rep.Items[i].Detail)
		}
	}
	ctx := context.Background()
	s, err := greenKC.CoreV1().Secrets(ns).Get(ctx, "creds", metav1.GetOptions{})
	if err != nil || string(s.Data["password"]) != "green-password" || s.Labels["release"] != "2" || s.Immutable == nil || !*s.Immutable {
		t.Errorf("green's Secret creds after the refused remake: %v; want green's, as it was", err)
	}
	j, err := greenKC.BatchV1().Jobs(ns).Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil || j.Spec.Template.Spec.Containers[0].Image != "registry.example/report:2" || j.Spec.Suspend == nil || !*j.Spec.Suspend {
		t.Errorf("green's Job nightly after the refused remake: %v; want green's, as it was", err)
	}
}
