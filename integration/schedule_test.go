package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/internal/buildinfo"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/schedule"
	"github.com/ferrykube/ferry/snapshot"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// runJob runs the command line of a CronJob's container as its pod would, with its environment
// (Secret references resolved from the cluster as the kubelet does), against cluster. In a pod
// ferry uses the in-cluster configuration; outside one that cannot work, so the kubeconfig and
// context are given as flags, and the requests are made as the job's ServiceAccount
// (impersonated), so that they are authorized by the RBAC the schedule made.
func runJob(t *testing.T, kc kubernetes.Interface, cj *batchv1.CronJob, cluster string) (int, string, string) {
	t.Helper()
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	c := pod.Containers[0]
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	for _, e := range c.Env {
		value := e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			s, err := kc.CoreV1().Secrets(cj.Namespace).Get(context.Background(), ref.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("the job's secret: %v", err)
			}
			value = string(s.Data[ref.SecretKeyRef.Key])
		}
		if e.Name == "HOME" {
			value = t.TempDir()
		}
		env = append(env, e.Name+"="+value)
	}
	if c.Command[0] != "ferry" {
		t.Fatalf("the job runs %q, not ferry", c.Command)
	}
	args := append(slices.Clone(c.Command[1:]), c.Args...)
	// The ferry.yaml the job mounts from its ConfigMap, read here from the ConfigMap.
	if i := slices.Index(args, schedule.ConfigDir+"/"+schedule.ConfigFile); i >= 0 {
		cm, err := kc.CoreV1().ConfigMaps(cj.Namespace).Get(context.Background(), schedule.ResourceName(cj.Name), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the job's ferry.yaml: %v", err)
		}
		args[i] = filepath.Join(t.TempDir(), schedule.ConfigFile)
		if err := os.WriteFile(args[i], []byte(cm.Data[schedule.ConfigFile]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args = append(args, "--kubeconfig", tb.Kubeconfig, "--context", cluster,
		"--as", "system:serviceaccount:"+cj.Namespace+":"+pod.ServiceAccountName)
	cmd := exec.Command(ferryBinary(t), args...)
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestScheduleBacksUpAndRecovers: ferry schedule create makes the CronJob, its ServiceAccount and
// RBAC on blue (a dry run makes nothing), the RBAC no more than a backup of the plan needs (access
// reviews); the job's command line, run as its ServiceAccount, makes
// a complete backup named after the schedule; that backup, found as latest:nightly, restores onto
// a cluster that never saw blue and verifies clean; ferry schedule delete removes what create made.
func TestScheduleBacksUpAndRecovers(t *testing.T) {
	// Blue's platform with its database and bucket data, so that the job dumps and copies them too.
	blueMySQL(t)
	blueMinIO(t)
	_, blue := clients(t, "blue")
	ctx := context.Background()
	url := backupMinIO(t, "schedule")
	const ns, name, secret = "ferry-system", "nightly", "ferry-storage"
	// The kubeflow preset, and what every ferry.yaml of the testbed excludes (kwok's resources).
	config := filepath.Join(t.TempDir(), "ferry.yaml")
	if err := os.WriteFile(config, []byte("preset: kubeflow\n"+testbed.FerryConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	create := []string{"--storage", url, "schedule", "create", name, "--cron", "0 2 * * *", "--from", "blue",
		"--storage-secret", secret, "-f", config}
	t.Cleanup(func() {
		runFerry(t, "schedule", "delete", name, "--from", "blue")
		blue.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	// Bad input names the flag.
	if code, _, errOut := runFerry(t, "--storage", url, "schedule", "create", name, "--cron", "0 25 * * *", "--from", "blue"); code != 2 || !strings.Contains(errOut, "--cron") {
		t.Errorf("a bad cron expression: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runFerry(t, "schedule", "create", name, "--cron", "@daily", "--from", "blue"); code != 2 || !strings.Contains(errOut, "--storage") {
		t.Errorf("local storage for a schedule: exit %d, %s", code, errOut)
	}

	// A dry run prints the manifests and creates nothing.
	code, out, errOut := runFerry(t, append(create, "--dry-run", "-o", "yaml")...)
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s", code, errOut)
	}
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "CronJob"} {
		if !regexpLine(out, "kind: "+kind+"$") {
			t.Errorf("the dry run prints no %s:\n%s", kind, out)
		}
	}
	if strings.Contains(out, os.Getenv("AWS_SECRET_ACCESS_KEY")) {
		t.Error("the manifests hold the secret key")
	}
	if _, err := blue.BatchV1().CronJobs(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the dry run created the CronJob: %v", err)
	}
	if _, err := blue.RbacV1().ClusterRoles().Get(ctx, "ferry-schedule:"+ns+":"+name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the dry run created the ClusterRole: %v", err)
	}

	// Create, then the user's Secret (create names it when it is missing).
	code, out, errOut = runFerry(t, create...)
	if code != 0 || !strings.Contains(out, "cronjob/"+name+" created") {
		t.Fatalf("schedule create: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "Secret "+ns+"/"+secret+" does not exist yet") {
		t.Errorf("create should say the Secret is missing:\n%s", out)
	}
	creds := map[string][]byte{}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		creds[k] = []byte(os.Getenv(k))
	}
	if _, err := blue.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret}, Data: creds}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runFerry(t, create...); code != 2 || !strings.Contains(errOut, "already exists") {
		t.Errorf("creating it twice: exit %d, %s", code, errOut)
	}

	cj, err := blue.BatchV1().CronJobs(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	if cj.Spec.Schedule != "0 2 * * *" || cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || len(pod.Containers) != 1 {
		t.Fatalf("cronjob spec: %q %s, %d containers", cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy, len(pod.Containers))
	}
	if d, a := cj.Spec.StartingDeadlineSeconds, cj.Spec.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d != 3600 || a == nil || *a != 6*3600 {
		t.Errorf("deadlines: starting %v, active %v; want 3600 and 21600", d, a)
	}
	c := pod.Containers[0]
	image := "ghcr.io/ferrykube/ferry:" + buildinfo.Read().Version
	wantArgs := []string{"backup", "--storage", url, "--log-format", "json", "--progress", "never", "--schedule", name, "--mover-image", image, "-f", schedule.ConfigDir + "/" + schedule.ConfigFile}
	if c.Image != image || !slices.Equal(c.Command, []string{"ferry"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("the job runs %s %q %q, want %s ferry %q", c.Image, c.Command, c.Args, image, wantArgs)
	}
	if pod.ServiceAccountName != "ferry-schedule-"+name {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	refs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		} else if strings.HasPrefix(e.Name, "AWS_") {
			t.Errorf("%s is inline", e.Name)
		}
	}
	if refs["AWS_ACCESS_KEY_ID"] != secret+"/AWS_ACCESS_KEY_ID" || refs["AWS_SECRET_ACCESS_KEY"] != secret+"/AWS_SECRET_ACCESS_KEY" {
		t.Errorf("credentials from the Secret: %v", refs)
	}
	if sc := c.SecurityContext; sc == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context: %+v", sc)
	}
	if _, err := blue.CoreV1().ServiceAccounts(ns).Get(ctx, pod.ServiceAccountName, metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	crb, err := blue.RbacV1().ClusterRoleBindings().Get(ctx, "ferry-schedule:"+ns+":"+name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crb.Subjects[0].Name != pod.ServiceAccountName || crb.Subjects[0].Namespace != ns {
		t.Errorf("binding subjects: %+v", crb.Subjects)
	}
	code, out, _ = runFerry(t, "schedule", "list", "--from", "blue", "-o", "json")
	var listed []struct{ Name, Cron, Storage string }
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed) != 1 || listed[0].Name != name || listed[0].Cron != "0 2 * * *" || listed[0].Storage != url {
		t.Errorf("schedule list: exit %d, %v, %s", code, err, out)
	}

	// The ServiceAccount reads everything but writes nothing beyond pods.
	cfg, err := testbed.Require(t, tb).Clusters["blue"].RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + pod.ServiceAccountName}
	asJob := kubernetes.NewForConfigOrDie(cfg)
	if _, err := asJob.CoreV1().Secrets("kubeflow").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the job's ServiceAccount cannot list Secrets: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written-by-the-job"}}
	if _, err := asJob.CoreV1().ConfigMaps("kubeflow").Create(ctx, cm, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the job's ServiceAccount may create a ConfigMap: %v", err)
	}
	if err := asJob.AppsV1().Deployments("kubeflow").Delete(ctx, "mysql", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the job's ServiceAccount may delete a Deployment: %v", err)
	}

	// SubjectAccessReviews: no subresource through a wildcard, no pod anywhere but in the plan's
	// data namespaces, and everything the plan's backup reads.
	checkScheduleAccess(t, blue, ns, pod.ServiceAccountName, cj)

	// The job's run.
	code, out, errOut = runJob(t, blue, cj, "blue")
	if code != 0 && code != 3 {
		t.Fatalf("the job's ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	backup := regexp.MustCompile(`Backup (` + name + `-[0-9]{8}-[0-9]{6}) is complete`).FindStringSubmatch(out)
	if backup == nil {
		t.Fatalf("no complete backup named %s-YYYYMMDD-HHMMSS:\n%s", name, out)
	}
	t.Logf("the job made %s (exit %d)", backup[1], code)
	store, m := readManifest(t, url, backup[1])
	if m.Schedule != name || len(m.Objects) == 0 || len(m.Databases) == 0 || len(m.Buckets) == 0 {
		t.Errorf("manifest: schedule %q, %d objects, %d databases, %d buckets", m.Schedule, len(m.Objects), len(m.Databases), len(m.Buckets))
	}
	var velero struct {
		Metadata struct{ Labels map[string]string }
	}
	if err := json.Unmarshal(readStored(t, store, backup[1], snapshot.VeleroFile, nil), &velero); err != nil || velero.Metadata.Labels["velero.io/schedule-name"] != name {
		t.Errorf("velero-backup.json labels: %v %v", velero.Metadata.Labels, err)
	}

	// Disaster recovery: the schedule's latest backup onto a cluster that never saw blue.
	_, dr := fresh(t)
	classes := []string{"--storage-class-map", "gp3=standard,nfs-client=standard"}
	code, rep, errOut := runReportCommand(t, append([]string{"--storage", url, "restore", "--to", "dr", "--backup", "latest:" + name}, classes...)...)
	if rep.Counts["objects"][snapshot.StatusFailed] != 0 || rep.Error != "" || code == 1 || code == 2 {
		t.Fatalf("restore of latest:%s exited %d: %s %+v\nstderr: %s", name, code, rep.Error, rep.Items, errOut)
	}
	if !strings.Contains(errOut, backup[1]) {
		t.Errorf("restore should log the backup latest:%s resolved to (%s):\n%s", name, backup[1], errOut)
	}
	t.Logf("restore: exit %d, %v", code, rep.Counts)
	for _, it := range rep.Items {
		t.Logf("  %s %s %s: %s", it.Kind, it.Status, it.Name, it.Detail)
	}
	// Restored, or unchanged where an earlier test of the package restored the same data there.
	for _, kind := range []string{"databases", "buckets"} {
		if rep.Counts[kind][snapshot.StatusRestored]+rep.Counts[kind][snapshot.StatusUnchanged] == 0 {
			t.Errorf("the %s should be restored: %v", kind, rep.Counts)
		}
	}
	code, rep, errOut = runReportCommand(t, append([]string{"--storage", url, "verify", "--to", "dr", "--backup", "latest:" + name}, classes...)...)
	if code != 0 {
		t.Errorf("verify of latest:%s exited %d: %s\n%+v\nstderr: %s", name, code, rep.Error, rep.Items, errOut)
	}
	if rep.Counts["objects"][snapshot.StatusIdentical] == 0 || rep.Counts["databases"][snapshot.StatusIdentical] == 0 {
		t.Errorf("verify checked no objects: %v", rep.Counts)
	}
	if _, err := dr.CoreV1().ConfigMaps("kubeflow").Get(ctx, "pipeline-install-config", metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
	if code, _, errOut := runFerry(t, "--storage", url, "restore", "--to", "dr", "--backup", "latest:weekly"); code != 2 || !strings.Contains(errOut, `no complete backup of schedule "weekly"`) {
		t.Errorf("latest of a schedule with no backups: exit %d, %s", code, errOut)
	}

	// Delete removes what create made; the backups stay.
	code, out, errOut = runFerry(t, "schedule", "delete", name, "--from", "blue")
	if code != 0 {
		t.Fatalf("schedule delete: exit %d\n%s%s", code, out, errOut)
	}
	for what, err := range map[string]error{
		"cronjob":            errOf(blue.BatchV1().CronJobs(ns).Get(ctx, name, metav1.GetOptions{})),
		"serviceaccount":     errOf(blue.CoreV1().ServiceAccounts(ns).Get(ctx, pod.ServiceAccountName, metav1.GetOptions{})),
		"clusterrole":        errOf(blue.RbacV1().ClusterRoles().Get(ctx, crb.RoleRef.Name, metav1.GetOptions{})),
		"clusterrolebinding": errOf(blue.RbacV1().ClusterRoleBindings().Get(ctx, crb.Name, metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after delete: %v", what, err)
		}
	}
	if _, err := blue.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{}); err != nil {
		t.Errorf("the user's Secret is not ferry's to delete: %v", err)
	}
	if code, _, _ := runFerry(t, "schedule", "delete", name, "--from", "blue"); code != 2 {
		t.Errorf("deleting it again: exit %d, want 2", code)
	}
	readManifest(t, url, backup[1])
}

func errOf[T any](_ T, err error) error { return err }

// checkScheduleAccess asks blue's authorizer (SubjectAccessReviews) what the schedule's
// ServiceAccount may do: never get nodes/proxy, pods/proxy or services/proxy, never create pods
// or exec outside the plan's data namespaces (kube-system), write nothing but pods; and get and
// list every type of the plan the job backs up, and make, exec into and port-forward to pods
// in each data namespace (kubeflow's among them).
func checkScheduleAccess(t *testing.T, kc kubernetes.Interface, ns, sa string, cj *batchv1.CronJob) {
	t.Helper()
	ctx := context.Background()
	can := func(a authorizationv1.ResourceAttributes) bool {
		t.Helper()
		review, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + ns + ":" + sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &a,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("access review %+v: %v", a, err)
		}
		return review.Status.Allowed
	}
	bindings, err := kc.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{LabelSelector: "ferry.dev/schedule=" + cj.Name})
	if err != nil {
		t.Fatal(err)
	}
	var dataNS []string
	for _, b := range bindings.Items {
		dataNS = append(dataNS, b.Namespace)
	}
	if !slices.Contains(dataNS, "kubeflow") {
		t.Errorf("the schedule's data namespaces are %v, want kubeflow's databases and buckets among them", dataNS)
	}
	t.Logf("data namespaces: %v", dataNS)
	denied := []authorizationv1.ResourceAttributes{
		{Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "node-1"},
		{Verb: "create", Resource: "nodes", Subresource: "proxy", Name: "node-1"},
		{Verb: "get", Resource: "pods", Subresource: "proxy", Namespace: "kubeflow", Name: "any"},
		{Verb: "get", Resource: "services", Subresource: "proxy", Namespace: "kubeflow", Name: "any"},
		{Verb: "create", Resource: "pods", Namespace: "kube-system"},
		{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "kube-system", Name: "any"},
		{Verb: "create", Resource: "pods", Subresource: "portforward", Namespace: "kube-system", Name: "any"},
		{Verb: "delete", Resource: "pods", Namespace: "kube-system", Name: "any"},
		{Verb: "create", Resource: "pods", Namespace: ns},
		{Verb: "list", Resource: "nodes"},
		{Verb: "create", Resource: "configmaps", Namespace: "kubeflow"},
		{Verb: "update", Resource: "secrets", Namespace: "kubeflow", Name: "any"},
		{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: "kubeflow"},
	}
	for _, a := range denied {
		if can(a) {
			t.Errorf("the schedule's ServiceAccount may %s %s/%s in %q", a.Verb, a.Resource, a.Subresource, a.Namespace)
		}
	}
	allowed := []authorizationv1.ResourceAttributes{
		{Verb: "list", Resource: "secrets"},
		{Verb: "list", Resource: "namespaces"},
		{Verb: "get", Resource: "persistentvolumes", Name: "any"},
		{Verb: "list", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
	}
	for _, d := range dataNS {
		for _, v := range []string{"create", "delete", "get", "list", "watch"} {
			allowed = append(allowed, authorizationv1.ResourceAttributes{Verb: v, Resource: "pods", Namespace: d, Name: "any"})
		}
		for _, sub := range []string{"exec", "portforward"} {
			for _, v := range []string{"create", "get"} {
				allowed = append(allowed, authorizationv1.ResourceAttributes{Verb: v, Resource: "pods", Subresource: sub, Namespace: d, Name: "any"})
			}
		}
	}
	// Every type the plan of the job's configuration moves.
	planFile := filepath.Join(t.TempDir(), "plan.yaml")
	if code, _, errOut := runFerry(t, "plan", "--from", "blue", "--preset", "kubeflow", "-o", planFile); code != 0 && code != 3 {
		t.Fatalf("plan: exit %d\n%s", code, errOut)
	}
	p, err := plans.ReadFile(planFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Resources {
		for _, v := range []string{"get", "list"} {
			allowed = append(allowed, authorizationv1.ResourceAttributes{Verb: v, Group: r.Group, Resource: r.Resource})
		}
	}
	for _, a := range allowed {
		if !can(a) {
			t.Errorf("the schedule's ServiceAccount may not %s %s/%s (group %q) in %q, which its backup needs", a.Verb, a.Resource, a.Subresource, a.Group, a.Namespace)
		}
	}
	t.Logf("access reviews: %d denied as they should be, %d allowed (%d types of the plan)", len(denied), len(allowed), len(p.Resources))
}
