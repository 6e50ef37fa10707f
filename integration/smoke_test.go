package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/internal/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// tb is the testbed every test of this package shares.
var tb *testbed.Testbed

func TestMain(m *testing.M) {
	os.Exit(testbed.Main(m, testbed.Everything, &tb))
}

func clients(t testing.TB, cluster string) (*testbed.Cluster, kubernetes.Interface) {
	return clientsB(t, cluster)
}

func clientsB(t testing.TB, cluster string) (*testbed.Cluster, kubernetes.Interface) {
	t.Helper()
	c := testbed.Require(t, tb).Clusters[cluster]
	kc, _, err := c.Clients()
	if err != nil {
		t.Fatal(err)
	}
	return c, kc
}

func waitUntil(t testing.TB, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// simplePod is a pod the testbed's kwok nodes run; the image is never pulled.
func simplePod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

func runPod(t testing.TB, kc kubernetes.Interface, namespace string, pod *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "pod "+pod.Name+" running", 30*time.Second, func(ctx context.Context) (bool, error) {
		p, err := kc.CoreV1().Pods(namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
}

func TestDeploymentBecomesAvailableOnBlue(t *testing.T) {
	_, kc := clients(t, "blue")
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
	if _, err := kc.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "deployment web Available with 3 ready replicas", 60*time.Second, func(ctx context.Context) (bool, error) {
		d, err := kc.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && d.Status.ReadyReplicas == 3 {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestCRDEstablishedOnGreen(t *testing.T) {
	c := testbed.Require(t, tb).Clusters["green"]
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	ax, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{
		// A group of its own: restores onto green bring the platform's CRDs, Profiles' among them.
		ObjectMeta: metav1.ObjectMeta{Name: "probes.smoke.ferry.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "smoke.ferry.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "probes", Singular: "probe", Kind: "Probe", ListKind: "ProbeList"},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	if _, err := ax.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ax.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	waitUntil(t, "CRD "+crd.Name+" Established", 30*time.Second, func(ctx context.Context) (bool, error) {
		got, err := ax.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

func TestExecReadsMappedDirectory(t *testing.T) {
	c, kc := clients(t, "blue")
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("from the volume\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runPod(t, kc, "default", simplePod("reader"))
	if err := c.MapExec(ctx, "default", "reader", dir, map[string]string{"GREETING": "hi"}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := c.RESTConfig()
	var out, errOut bytes.Buffer
	err := kube.Exec(ctx, cfg, kc, kube.ExecRequest{Namespace: "default", Pod: "reader", Container: "main",
		// kwok never closes a local command's stdin, so what reads stdin must know where it ends.
		Command: []string{"sh", "-c", `cat hello.txt; echo "$GREETING"; pwd; head -c 18 > written.txt`},
		Stdin:   strings.NewReader("sent through stdin"), Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("exec: %v; stderr: %s", err, errOut.String())
	}
	if want := "from the volume\nhi\n" + dir + "\n"; out.String() != want {
		t.Fatalf("exec printed %q, want %q", out.String(), want)
	}
	got, err := os.ReadFile(filepath.Join(dir, "written.txt"))
	if err != nil || string(got) != "sent through stdin" {
		t.Fatalf("stdin written to the mapped directory: %q, %v", got, err)
	}
	// A failing command is an error, not a silent success.
	err = kube.Exec(ctx, cfg, kc, kube.ExecRequest{Namespace: "default", Pod: "reader", Command: []string{"sh", "-c", "exit 3"}, Stdout: &out})
	if err == nil {
		t.Fatal("exec of a failing command returned no error")
	}
}

func TestPortForwardReachesBlueMinIO(t *testing.T) {
	c, kc := clients(t, "blue")
	minio := tb.MinIO["blue"]
	ctx := context.Background()
	// Not the kubeflow namespace: the Kubeflow fixture enforces the restricted pod security level there.
	const ns = "object-store"
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	runPod(t, kc, ns, simplePod("minio"))
	if err := c.MapPortForward(ctx, ns, "minio", 9000, "127.0.0.1", minio.Port); err != nil {
		t.Fatal(err)
	}
	if err := minio.CreateBucket(ctx, "mlpipeline"); err != nil {
		t.Fatal(err)
	}
	cfg, _ := c.RESTConfig()
	addr, stop, err := kube.PortForward(ctx, cfg, kc, ns, "minio", 9000)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/minio/health/live")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("MinIO health through the port-forward: %s", resp.Status)
	}
	// It is blue's MinIO, not another: its bucket is there.
	forwarded := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + addr), UsePathStyle: true, Credentials: minio.Credentials()})
	if _, err := forwarded.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("mlpipeline")}); err != nil {
		t.Fatalf("bucket mlpipeline through the port-forward: %v", err)
	}
}

func TestEachMariaDBAnswersThroughExec(t *testing.T) {
	for _, name := range []string{"blue", "green"} {
		t.Run(name, func(t *testing.T) {
			c, kc := clients(t, name)
			db := tb.MariaDB[name]
			ctx := context.Background()
			pod := "mysql-" + name
			runPod(t, kc, "default", simplePod(pod))
			if err := c.MapExec(ctx, "default", pod, t.TempDir(), db.Env()); err != nil {
				t.Fatal(err)
			}
			cfg, _ := c.RESTConfig()
			var out, errOut bytes.Buffer
			err := kube.Exec(ctx, cfg, kc, kube.ExecRequest{Namespace: "default", Pod: pod,
				Command: []string{"mariadb", "-uroot", "--batch", "--skip-column-names", "-e", "SELECT @@port"}, Stdout: &out, Stderr: &errOut})
			if err != nil {
				t.Fatalf("%v; stderr: %s", err, errOut.String())
			}
			if got := strings.TrimSpace(out.String()); got != strconv.Itoa(db.Port) {
				t.Fatalf("%s's database pod reached the server on port %s, want %s's (%d)", name, got, name, db.Port)
			}
		})
	}
}

// Each cluster is its own: what is created on blue does not appear on green.
func TestClustersAreSeparate(t *testing.T) {
	_, blue := clients(t, "blue")
	_, green := clients(t, "green")
	ctx := context.Background()
	ns := fmt.Sprintf("only-on-blue-%d", time.Now().UnixNano())
	if _, err := blue.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := green.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		t.Fatalf("namespace %s made on blue is visible on green", ns)
	}
}

func TestEachPostgreSQLAnswersThroughExec(t *testing.T) {
	for _, name := range []string{"blue", "green"} {
		t.Run(name, func(t *testing.T) {
			c, kc := clients(t, name)
			pg := tb.Postgres[name]
			ctx := context.Background()
			pod := "postgres-" + name
			runPod(t, kc, "default", simplePod(pod))
			if err := c.MapExec(ctx, "default", pod, t.TempDir(), pg.Env()); err != nil {
				t.Fatal(err)
			}
			cfg, _ := c.RESTConfig()
			var out, errOut bytes.Buffer
			err := kube.Exec(ctx, cfg, kc, kube.ExecRequest{Namespace: "default", Pod: pod,
				Command: []string{"psql", "-X", "-At", "-c", "SHOW port"}, Stdout: &out, Stderr: &errOut})
			if err != nil {
				t.Fatalf("%v; stderr: %s", err, errOut.String())
			}
			if got := strings.TrimSpace(out.String()); got != strconv.Itoa(pg.Port) {
				t.Fatalf("%s's database pod reached the server on port %s, want %d", name, got, pg.Port)
			}
		})
	}
}

// TestMapExecWaitsThroughRewrites: a mapping kwok does not act on at once is written again each
// second (the testbed's way around kwok's cached list); one whose folder appears only after
// three seconds, so that it is rewritten more than once, still maps, and exec runs in it.
func TestMapExecWaitsThroughRewrites(t *testing.T) {
	c, kc := clients(t, "green")
	dir := filepath.Join(t.TempDir(), "made-later")
	runPod(t, kc, "default", simplePod("map-exec-rewrites"))
	t.Cleanup(func() {
		kc.CoreV1().Pods("default").Delete(context.Background(), "map-exec-rewrites", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	made := time.AfterFunc(3500*time.Millisecond, func() { os.Mkdir(dir, 0o755) })
	defer made.Stop()
	start := time.Now()
	if err := c.MapExec(context.Background(), "default", "map-exec-rewrites", dir, nil); err != nil {
		t.Fatalf("MapExec after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if took := time.Since(start); took < 3*time.Second {
		t.Fatalf("MapExec returned after %s, before the folder was made", took.Round(time.Millisecond))
	}
}
