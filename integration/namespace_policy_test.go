package integration

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestNamespacesOverTheirQuotaMove: Kubernetes checks a ResourceQuota only when an object is
// made, so a namespace may hold more than its quota allows: the quota was set, or lowered, after
// its claims, Secrets, ConfigMaps and Services were made (an admin lowers a Kubeflow Profile's
// quota). Such a namespace restores onto green as it was: every claim with its files, every
// object, and the quota with its limits, over which green then is as blue was.
func TestNamespacesOverTheirQuotaMove(t *testing.T) {
	blue, kc := clients(t, "blue")
	ctx := context.Background()
	const ns = "shapes-over-quota"
	createNamespace(t, kc, ns, nil)
	claims := []string{"home", "datasets"}
	dirs := map[string]string{}
	for _, claim := range claims {
		dir := dataDir(t, ns+"-"+claim)
		writeClaimFiles(t, dir, map[string][]byte{"notes/" + claim + ".txt": []byte("the files of " + claim + "\n")})
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To("gp3"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if _, err := kc.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := blue.BindClaim(ctx, ns, claim, dir); err != nil {
			t.Fatal(err)
		}
		dirs[claim] = dir
	}
	const objects = 3
	for i := range objects {
		name := fmt.Sprintf("team-%d", i)
		if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: map[string]string{"token": name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := kc.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The quota comes after: blue holds more than it allows.
	hard := corev1.ResourceList{"persistentvolumeclaims": resource.MustParse("1"), "requests.storage": resource.MustParse("1Gi"),
		"count/configmaps": resource.MustParse("1"), "count/secrets": resource.MustParse("1"), "services": resource.MustParse("1")}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "kf-resource-quota"}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}
	if _, err := kc.CoreV1().ResourceQuotas(ns).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "blue's quota counting the namespace's claims", time.Minute, func(ctx context.Context) (bool, error) {
		q, err := kc.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used := q.Status.Used["persistentvolumeclaims"]
		return used.Value() == int64(len(claims)), nil
	})

	storeDir := t.TempDir()
	if code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "over-quota"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	green, greenKC := clients(t, "green")
	removeAfter(t, ns, greenKC)
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "restore", "--to", "green", "--backup", "over-quota", "--storage-class-map", "gp3=standard"); code != 0 {
		t.Fatalf("ferry restore exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// Read on green directly: every claim bound with its files, every object, the quota's limits.
	for _, claim := range claims {
		pvc, err := greenKC.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Errorf("green's claim %s/%s: %v", ns, claim, err)
			continue
		}
		pv, err := greenKC.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil || pv.Spec.HostPath == nil {
			t.Errorf("green's volume of %s/%s: %v, %v", ns, claim, pv, err)
			continue
		}
		if got, want := claimFiles(t, pv.Spec.HostPath.Path), claimFiles(t, dirs[claim]); !equalMaps(got, want) {
			t.Errorf("green's claim %s holds %v, blue's %v", claim, got, want)
		}
	}
	for i := range objects {
		name := fmt.Sprintf("team-%d", i)
		if _, err := greenKC.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("green's ConfigMap %s/%s: %v", ns, name, err)
		}
		if _, err := greenKC.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("green's Secret %s/%s: %v", ns, name, err)
		}
		if _, err := greenKC.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("green's Service %s/%s: %v", ns, name, err)
		}
	}
	q, err := greenKC.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("green's quota: %v", err)
	}
	for name, want := range hard {
		if got := q.Spec.Hard[name]; got.Cmp(want) != 0 {
			t.Errorf("green's quota allows %s %s, blue's %s", name, got.String(), want.String())
		}
	}
	if code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "verify", "--to", "green", "--backup", "over-quota", "--storage-class-map", "gp3=standard"); code != 0 {
		t.Errorf("ferry verify exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}

	// A restore that replaces the target's objects (as a carry-back does) onto a namespace whose
	// quota is lower than the backup's: blue's quota was raised and a Service made under it.
	// Green's quota, still at 1, must not refuse the Service before its turn comes.
	if _, err := kc.CoreV1().ResourceQuotas(ns).Patch(ctx, quota.Name, types.MergePatchType, []byte(`{"spec":{"hard":{"services":"4"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "blue's quota raised", time.Minute, func(ctx context.Context) (bool, error) {
		q, err := kc.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return q.Status.Hard.Name("services", resource.DecimalSI).Value() == 4, nil
	})
	added := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "team-added"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "added"},
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := kc.CoreV1().Services(ns).Create(ctx, added, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "backup", "--from", "blue", "-f", namespacesConfig(t, ns), "--name", "raised-quota"); code != 0 {
		t.Fatalf("ferry backup exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if code, out, errOut := runFerry(t, "--storage", "file://"+storeDir, "restore", "--to", "green", "--backup", "raised-quota", "--storage-class-map", "gp3=standard", "--existing", "replace"); code != 0 {
		t.Errorf("ferry restore --existing replace exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, err := greenKC.CoreV1().Services(ns).Get(ctx, added.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("green's Service %s/%s after the restore that replaces: %v", ns, added.Name, err)
	}
	if q, err := greenKC.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{}); err != nil || q.Spec.Hard.Name("services", resource.DecimalSI).Value() != 4 {
		t.Errorf("green's quota after the restore that replaces: %v, %v; want services 4", q, err)
	}

	// A quota that is on the target before the namespace's objects come refuses those beyond
	// it: the plan says so before anything runs. One the target's namespace has already:
	const tight = ns + "-tight"
	createNamespace(t, greenKC, tight, nil)
	small := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "tight"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"services": resource.MustParse("2"), "count/configmaps": resource.MustParse("10")}}}
	if _, err := greenKC.CoreV1().ResourceQuotas(tight).Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", namespacesConfig(t, ns), "--namespace-map", ns+"="+tight, "--storage-class-map", "gp3=standard")
	if code != 3 || !regexpLine(out, `blocking\s+resourcequota `+tight+`/tight\s+on the target, it allows less than namespace `+ns+` holds on the source \(services 4, the quota allows 2\)`) {
		t.Errorf("ferry plan onto a namespace whose quota is smaller exited %d, want 3 and a blocking finding\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// And one another object makes (a Profile's controller): blue's quota gets an owner.
	owner, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "team-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err = kc.CoreV1().ResourceQuotas(ns).Get(ctx, quota.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	if _, err := kc.CoreV1().ResourceQuotas(ns).Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", namespacesConfig(t, ns), "--namespace-map", ns+"="+ns+"-new", "--storage-class-map", "gp3=standard")
	if code != 3 || !regexpLine(out, `blocking\s+resourcequota `+ns+`-new/kf-resource-quota\s+made on the target by the controller of configmap team-0 .*\(count/configmaps 3, the quota allows 1; `+
		`count/secrets 3, the quota allows 1; persistentvolumeclaims 2, the quota allows 1; requests.storage 2Gi, the quota allows 1Gi\)`) {
		t.Errorf("ferry plan of a namespace whose quota another object makes exited %d, want 3 and a blocking finding\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}

// TestPodsANamespaceNowRefuses: Kubernetes checks a namespace's Pod Security level and its
// LimitRanges only when a pod is made, so a namespace may run pods its policy now refuses: it was
// labelled restricted, or given a LimitRange, after they started. On green every pod is made
// anew, under the policy the namespace brings: those workloads would not start there. ferry plan
// --to names each with a blocking finding before anything runs; workloads that meet the policy
// are not named.
func TestPodsANamespaceNowRefuses(t *testing.T) {
	green, _ := clients(t, "green")
	_, kc := clients(t, "blue")
	ctx := context.Background()
	const secure, limited = "shapes-policy-restricted", "shapes-policy-limits"
	createNamespace(t, kc, secure, nil)
	createNamespace(t, kc, limited, nil)
	deploy := func(ns, name string, c corev1.Container) {
		t.Helper()
		labels := map[string]string{"app": name}
		c.Name, c.Image = "app", name
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}
		if _, err := kc.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		runningPod(t, kc, ns, "app="+name)
	}
	deploy(secure, "legacy", corev1.Container{})
	deploy(secure, "hardened", corev1.Container{SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}})
	claimTemplateSet(t, secure, "db")
	// Scaled to zero by its owner: it makes no pods to refuse.
	deploy(secure, "parked", corev1.Container{})
	if _, err := kc.AppsV1().Deployments(secure).Patch(ctx, "parked", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cpu := func(n string) corev1.ResourceRequirements {
		list := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(n)}
		return corev1.ResourceRequirements{Requests: list, Limits: list}
	}
	deploy(limited, "big", corev1.Container{Resources: cpu("2")})
	deploy(limited, "small", corev1.Container{Resources: cpu("500m")})

	// The policies come after the pods.
	ns, err := kc.CoreV1().Namespaces().Get(ctx, secure, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if _, err := kc.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "bounds"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
		Type: corev1.LimitTypeContainer, Max: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}
	if _, err := kc.CoreV1().LimitRanges(limited).Create(ctx, lr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := green.Apply(ctx, io.Discard, filepath.Join(repoDir(), "integration", "testdata", "standard-storageclass.yaml")); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runFerry(t, "plan", "--from", "blue", "--to", "green", "-f", namespacesConfig(t, secure, limited), "--storage-class-map", "gp3=standard")
	if code != 3 {
		t.Errorf("ferry plan exited %d, want 3 (blocking findings)\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	for _, want := range []string{
		`blocking\s+deployment ` + secure + `/legacy\s+.*violates PodSecurity "restricted`,
		`blocking\s+statefulset ` + secure + `/db\s+.*violates PodSecurity "restricted`,
		`blocking\s+deployment ` + limited + `/big\s+.*maximum cpu usage per Container is 1`,
	} {
		if !regexpLine(out, want) {
			t.Errorf("ferry plan does not say %q\nstdout: %s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "blocking") {
			t.Log(line)
		}
	}
	for _, fine := range []string{secure + "/hardened", secure + "/parked", limited + "/small"} {
		if strings.Contains(out, fine) {
			t.Errorf("ferry plan names %s, whose pods meet the policy\nstdout: %s", fine, out)
		}
	}
}
