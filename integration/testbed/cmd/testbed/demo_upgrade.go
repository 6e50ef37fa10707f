package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/ferrykube/ferry/integration/testbed"
	"github.com/ferrykube/ferry/migrate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The upgrade demo's scenario: release 1 of the sample platform on blue with alice's and bob's
// profiles and a PyTorchJob of alice's, a kind release 2 (on green) no longer has.
const (
	leaveBehind = "pytorchjobs.kubeflow.org"
	pytorchJob  = "PyTorchJob alice/train"
)

var (
	profiles  = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "profiles"}
	notebooks = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "notebooks"}
	crds      = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// demoUpgrade runs the blue-green platform upgrade end to end on a fresh persistent testbed:
// release 1 of the sample platform (examples/platform) with its users and their data on blue,
// release 2 (examples/platform-v2) installed on green with its own database credentials; ferry
// plan --upgrade and ferry migrate --upgrade refuse, naming a PyTorchJob release 2 has no place
// for; ferry migrate --upgrade --leave-behind moves the state only; then what a user would check
// on green and on blue.
func demoUpgrade(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo-upgrade", flag.ContinueOnError)
	dir := fs.String("dir", filepath.Join(os.TempDir(), "ferry-testbed"), "folder holding the testbed's state")
	ferry := fs.String("ferry", "bin/ferry", "the ferry binary to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tb, err := freshTestbed(ctx, *dir, *ferry)
	if err != nil {
		return err
	}
	blue, green := tb.Clusters["blue"], tb.Clusters["green"]

	v1, v2 := filepath.Join("examples", "platform"), filepath.Join("examples", "platform-v2")
	stage("applying release 1 of the sample platform (%s) with alice's and bob's profiles to blue", v1)
	if err := blue.Apply(ctx, io.Discard, filepath.Join(v1, "00-crds.yaml"), filepath.Join(v1, "10-platform.yaml"), filepath.Join(v1, "20-profiles.yaml")); err != nil {
		return err
	}
	stage("installing release 2 (%s, without the profiles) on green, with StorageClass standard", v2)
	fmt.Printf("    release 2: the PyTorchJob CRD and Training Operator removed, Trainer added in kubeflow-system, AuthorizationPolicy stored in v1, KFP 2.15 and MySQL 8.4\n")
	if err := green.ApplyStandardStorageClass(ctx); err != nil {
		return err
	}
	if err := green.Apply(ctx, io.Discard, filepath.Join(v2, "00-crds.yaml"), filepath.Join(v2, "10-platform.yaml")); err != nil {
		return err
	}

	workspaces := []string{"alice/workspace-alice-nb", "bob/workspace-bob-nb"}
	stage("seeding blue's data: kfp MySQL (mlpipeline, cachedb), MinIO bucket %s, the volumes %s", testbed.PlatformBucket, strings.Join(workspaces, " and "))
	seeded, err := tb.SeedPlatform(ctx, blue, tb.DataDir)
	if err != nil {
		return err
	}
	for _, w := range workspaces {
		if err := seedWorkspace(ctx, tb, blue, w); err != nil {
			return err
		}
	}
	for _, selector := range []string{"app=mysql", "app=minio"} {
		if err := runningPod(ctx, blue, "kubeflow", selector); err != nil {
			return err
		}
	}
	fmt.Printf("    blue: 502 database rows in 2 schemas, %d objects in bucket %s, files in both volumes\n", len(seeded.Objects), testbed.PlatformBucket)

	stage("readying green: its database and MinIO pods served by green's servers, release 2's own credentials in its Secrets")
	if err := tb.ServePlatform(ctx, green, "green"); err != nil {
		return err
	}
	if err := tb.SetPlatformCredentials(ctx, green, "green"); err != nil {
		return err
	}

	greenKC, _, err := green.Clients()
	if err != nil {
		return err
	}
	api, err := greenKC.AppsV1().Deployments("kubeflow").Get(ctx, "ml-pipeline", metav1.GetOptions{})
	if err != nil || api.Spec.Replicas == nil {
		return fmt.Errorf("green's Deployment kubeflow/ml-pipeline: %v", err)
	}
	apiReplicas := *api.Spec.Replicas

	stage("alice starts a training job on blue: %s (kubeflow.org/v1, a kind release 2 no longer has)", pytorchJob)
	if err := blue.AddPyTorchJob(ctx, "alice", "train"); err != nil {
		return err
	}

	backup := tb.MinIO["backup"]
	storage := "s3://ferry/demo-upgrade?endpoint=" + backup.Endpoint + "&path-style=true"
	ferryCmd := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, *ferry, append([]string{"--kubeconfig", tb.Kubeconfig}, args...)...)
		cmd.Env = append(os.Environ(), backup.Env()...) // the backup MinIO's keys
		return cmd
	}
	work := filepath.Join(tb.Dir, "data")
	// The testbed's ferry.yaml: kwok's own resources stay in each cluster.
	config := filepath.Join(work, "ferry-upgrade.yaml")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(config, []byte(testbed.FerryConfig), 0o644); err != nil {
		return err
	}
	upgrade := []string{"--upgrade", "--preset", "kubeflow", "-f", config, "--from", "blue", "--to", "green"}

	plan := append([]string{"plan"}, upgrade...)
	stage("%s %s   (what moves, what is left to green's release, the releases' differences)", *ferry, shellJoin(plan))
	out, errOut, err := runShown(ferryCmd(plan...), filepath.Join(work, "ferry-plan-upgrade.log"))
	fmt.Print(indent(out))
	if code := exitCode(err); code != 3 || !strings.Contains(out+errOut, pytorchJob) {
		return fmt.Errorf("ferry plan --upgrade exited %d, want 3 naming %s", code, pytorchJob)
	}
	fmt.Printf("    (exit 3: %s blocks the upgrade)\n", pytorchJob)

	migrateArgs := append([]string{"--storage", storage, "migrate"}, upgrade...)
	stage("%s %s   (ferry refuses, naming the PyTorchJob, and changes nothing)", *ferry, shellJoin(migrateArgs))
	out, errOut, err = runShown(ferryCmd(migrateArgs...), filepath.Join(work, "ferry-migrate-upgrade-refused.log"))
	fmt.Print(indent(out))
	if code := exitCode(err); code != 3 || !strings.Contains(out+errOut, pytorchJob) || !strings.Contains(out+errOut, "--leave-behind "+leaveBehind) {
		return fmt.Errorf("ferry migrate --upgrade exited %d, want 3 naming %s and --leave-behind %s", code, pytorchJob, leaveBehind)
	}
	fmt.Printf("    (exit 3)\n")

	migrateArgs = append(slices.Clone(migrateArgs), "--leave-behind", leaveBehind)
	progress := append([]string{"--progress", "always"}, migrateArgs...)
	stage("%s %s   (alice's PyTorchJob stays on blue)", *ferry, shellJoin(progress))
	logFile := filepath.Join(work, "ferry-migrate-upgrade.log")
	started := time.Now()
	out, errOut, err = runShown(ferryCmd(progress...), logFile)
	fmt.Printf("    (ferry's whole log, its INFO lines too: %s)\n", logFile)
	stage("ferry migrate --upgrade ended after %s with exit %d; its report", time.Since(started).Round(time.Second), exitCode(err))
	fmt.Print(indent(out))
	if err != nil {
		return fmt.Errorf("ferry migrate --upgrade --leave-behind %s: %w", leaveBehind, err)
	}
	id := ""
	if m := regexp.MustCompile(`Run (run-[0-9]{8}-[0-9]{6}-[0-9a-f]{6})`).FindStringSubmatch(errOut); m != nil {
		id = m[1]
	}

	stage("what a user checks after the upgrade")
	checks, err := upgradeChecks(ctx, tb, workspaces, len(seeded.Objects), apiReplicas)
	if err != nil {
		return err
	}
	fmt.Printf("\nSummary: blue's release 1 and green's release 2 as installed; ferry plan and migrate --upgrade refused while %s had no place on green (exit 3); "+
		"with --leave-behind %s the state moved: profiles, notebooks, volumes, database rows and bucket objects, in green's versions; the PyTorchJob stayed on blue.\n", pytorchJob, leaveBehind)
	if id != "" {
		fmt.Printf("The testbed stays up: %s %s migrate status %s shows the run again (AWS keys: make testbed-up prints them).\n", *ferry, shellJoin([]string{"--kubeconfig", tb.Kubeconfig, "--storage", storage}), id)
	}
	fmt.Printf("Clean up: make testbed-down\n")
	if len(checks) > 0 {
		return fmt.Errorf("after the upgrade: not as it should be: %s", strings.Join(checks, ", "))
	}
	return nil
}

// upgradeChecks looks at green and blue as a user would after the upgrade: green's release 2
// untouched (its ml-pipeline with the apiReplicas it was installed with), the users' objects, files, rows and bucket objects on green, the PyTorchJob on blue.
func upgradeChecks(ctx context.Context, tb *testbed.Testbed, workspaces []string, objects int, apiReplicas int32) (checklist, error) {
	blue, green := tb.Clusters["blue"], tb.Clusters["green"]
	greenKC, greenDyn, err := green.Clients()
	if err != nil {
		return nil, err
	}
	_, blueDyn, err := blue.Clients()
	if err != nil {
		return nil, err
	}
	var c checklist
	absent := func(err error) bool { return apierrors.IsNotFound(err) }

	fmt.Printf("  green's release 2, as installed:\n")
	_, err = greenKC.AppsV1().Deployments("kubeflow").Get(ctx, "training-operator", metav1.GetOptions{})
	c.check("no Deployment kubeflow/training-operator", absent(err))
	_, err = greenDyn.Resource(crds).Get(ctx, leaveBehind, metav1.GetOptions{})
	c.check("no CRD "+leaveBehind, absent(err))
	_, err = greenKC.CoreV1().Namespaces().Get(ctx, "kubeflow-system", metav1.GetOptions{})
	c.check("Namespace kubeflow-system", err == nil)
	_, err = greenKC.AppsV1().Deployments("kubeflow-system").Get(ctx, "kubeflow-trainer-controller-manager", metav1.GetOptions{})
	c.check("Deployment kubeflow-system/kubeflow-trainer-controller-manager", err == nil)
	ap, err := greenDyn.Resource(crds).Get(ctx, "authorizationpolicies.security.istio.io", metav1.GetOptions{})
	c.check("AuthorizationPolicy stored in v1", err == nil && storageVersion(ap) == "v1")
	// Green's writers were stopped while blue's data loaded; they run again as installed.
	api, err := greenKC.AppsV1().Deployments("kubeflow").Get(ctx, "ml-pipeline", metav1.GetOptions{})
	asInstalled := false
	if err == nil {
		_, quiesced := api.Annotations[migrate.QuiescedAnnotation]
		asInstalled = !quiesced && api.Spec.Replicas != nil && *api.Spec.Replicas == apiReplicas &&
			len(api.Spec.Template.Spec.Containers) > 0 && strings.HasSuffix(api.Spec.Template.Spec.Containers[0].Image, ":2.15.0")
	}
	c.check(fmt.Sprintf("ml-pipeline: kfp-api-server:2.15.0, %d replicas again", apiReplicas), asInstalled)

	fmt.Printf("  alice's and bob's state, on green:\n")
	for _, name := range []string{"alice", "bob"} {
		_, err := greenDyn.Resource(profiles).Get(ctx, name, metav1.GetOptions{})
		c.check("Profile "+name, err == nil)
		_, err = greenDyn.Resource(notebooks).Namespace(name).Get(ctx, name+"-nb", metav1.GetOptions{})
		c.check("Notebook "+name+"/"+name+"-nb", err == nil)
	}
	_, err = greenKC.CoreV1().ConfigMaps("bob").Get(ctx, "experiment-settings", metav1.GetOptions{})
	c.check("ConfigMap bob/experiment-settings", err == nil)
	for _, w := range workspaces {
		ns, claim, _ := strings.Cut(w, "/")
		dir, err := claimDir(ctx, greenKC, ns, claim)
		if err == nil {
			_, err = os.Stat(filepath.Join(dir, "model", "weights.bin"))
		}
		c.check("files in "+w, err == nil)
	}
	rows, err := tb.MariaDB["green"].SQL(ctx, tb.Bins, "SELECT COUNT(*) FROM mlpipeline.run_details")
	c.check("500 rows in mlpipeline.run_details (green's MariaDB)", err == nil && strings.TrimSpace(rows) == "500")
	listed, err := tb.MinIO["green"].S3Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(testbed.PlatformBucket)})
	c.check(fmt.Sprintf("%d objects in bucket %s (green's MinIO)", objects, testbed.PlatformBucket), err == nil && len(listed.Contents) == objects)

	fmt.Printf("  left behind, on blue:\n")
	_, err = blueDyn.Resource(testbed.PyTorchJobs).Namespace("alice").Get(ctx, "train", metav1.GetOptions{})
	c.check(pytorchJob, err == nil)
	return c, nil
}

// storageVersion is the version a CRD stores its objects in.
func storageVersion(crd *unstructured.Unstructured) string {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		if v, ok := v.(map[string]any); ok && v["storage"] == true {
			name, _ := v["name"].(string)
			return name
		}
	}
	return ""
}
