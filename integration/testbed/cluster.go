package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/kube"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is a kwok cluster with a real kube-apiserver, etcd, controller-manager and scheduler.
type Cluster struct {
	Name string `json:"name"`
	// Kubeconfig holds only this cluster, as context Name.
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	// WorkDir is kwokctl's for this cluster alone: clusters created at once in one workdir race
	// to make the shared CA.
	WorkDir string `json:"workDir"`

	bins    Binaries
	execBin string
	// stopWatchers ends the watchers started for this cluster after Start (RemoveCluster).
	stopWatchers context.CancelFunc
}

var (
	execGVR        = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}
	portForwardGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "portforwards"}
)

func (c *Cluster) kwokctl(ctx context.Context, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bins["kwokctl"], append([]string{"--name", c.Name}, args...)...)
	// kwok's controller inherits this environment, and runs the commands of exec requests with it.
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.WorkDir, "PATH="+c.execBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	log, err := os.OpenFile(filepath.Join(c.WorkDir, "kwokctl.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	w := io.Writer(log)
	if out != nil {
		w = io.MultiWriter(log, out)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		p := &Process{Log: log.Name()}
		return fmt.Errorf("kwokctl %s for cluster %s: %w; log %s ends:\n%s", args[0], c.Name, err, log.Name(), p.tail())
	}
	return nil
}

// kwokctlConfig is the configuration kwokctl creates each cluster with.
const kwokctlConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  bindAddress: 127.0.0.1
`

func createCluster(ctx context.Context, bins Binaries, dir, name string, nodes int, execBin string) (*Cluster, error) {
	c := &Cluster{Name: name, WorkDir: filepath.Join(dir, "kwok-"+name), bins: bins, execBin: execBin, Kubeconfig: filepath.Join(dir, name+".kubeconfig")}
	if err := os.MkdirAll(c.WorkDir, 0o755); err != nil {
		return nil, err
	}
	// kwokctl picks "unused" ports by probing, so two creations at once, here or in another test
	// package, can pick the same ones: create one cluster at a time on this machine.
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(cache, ".kwokctl-create.lock"))
	if err != nil {
		return nil, err
	}
	// Every component binds loopback only (kwokctl's default is 0.0.0.0), which only its
	// configuration file sets.
	config := filepath.Join(c.WorkDir, "kwokctl.yaml")
	if err := os.WriteFile(config, []byte(kwokctlConfig), 0o644); err != nil {
		unlock()
		return nil, err
	}
	err = c.kwokctl(ctx, nil, "--config", config, "create", "cluster", "--runtime", "binary",
		"--kubeconfig", filepath.Join(c.WorkDir, "kubeconfig"), // kwokctl adds a context here; never the user's
		"--kube-apiserver-binary", bins["kube-apiserver"],
		"--kube-controller-manager-binary", bins["kube-controller-manager"],
		"--kube-scheduler-binary", bins["kube-scheduler"],
		"--etcd-binary", bins["etcd"],
		"--kwok-controller-binary", bins["kwok"],
		"--enable-crds=Exec,ClusterExec,PortForward,ClusterPortForward",
		// The API server reaches kwok's kubelet endpoint through the nodes' Hostname address (localhost), never a node IP.
		"--extra-args", "kube-apiserver=kubelet-preferred-address-types=Hostname",
		"--disable-qps-limits",
		"--wait", "2m")
	unlock()
	if err == nil {
		err = c.writeKubeconfig()
	}
	if err == nil && nodes > 0 {
		err = c.kwokctl(ctx, nil, "scale", "node", "--replicas", strconv.Itoa(nodes))
	}
	if err == nil {
		err = c.waitReady(ctx, nodes)
	}
	// The cluster is returned also on error, so that Stop ends what kwokctl started.
	return c, err
}

// writeKubeconfig stores the cluster's kubeconfig with its context, cluster and user named after it.
func (c *Cluster) writeKubeconfig() error {
	cmd := exec.Command(c.bins["kwokctl"], "--name", c.Name, "get", "kubeconfig")
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.WorkDir)
	data, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kwokctl get kubeconfig for %s: %w", c.Name, err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", c.Name, err)
	}
	ctxName := cfg.CurrentContext
	kctx := cfg.Contexts[ctxName]
	if kctx == nil {
		return fmt.Errorf("kubeconfig of %s has no current context", c.Name)
	}
	cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	out := clientcmdapi.NewConfig()
	out.Clusters[c.Name] = cluster
	out.AuthInfos[c.Name] = user
	kctx.Cluster, kctx.AuthInfo = c.Name, c.Name
	out.Contexts[c.Name] = kctx
	out.CurrentContext = c.Name
	c.Server = cluster.Server
	return clientcmd.WriteToFile(*out, c.Kubeconfig)
}

// RESTConfig returns a client configuration for the cluster, without client-side throttling.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

// Clients returns a typed and a dynamic client for the cluster.
func (c *Cluster) Clients() (kubernetes.Interface, dynamic.Interface, error) {
	cfg, err := c.RESTConfig()
	if err != nil {
		return nil, nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	return kc, dc, err
}

// waitReady waits until the nodes are Ready and the controller-manager has made the default
// ServiceAccount, without which pods cannot be created.
func (c *Cluster) waitReady(ctx context.Context, nodes int) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	// Generous: late in a test run five clusters share two cores, and a controller-manager then takes
	// minutes to make the default ServiceAccount.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		err := func() error {
			if _, err := kc.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
			list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			ready := 0
			for _, n := range list.Items {
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready < nodes {
				return fmt.Errorf("%d of %d nodes ready", ready, nodes)
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("cluster %s not ready: %w", c.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Cluster) delete(ctx context.Context) error {
	// A cluster whose folder is gone has nothing left for kwokctl to stop (killUnder ends any
	// process still running from it); failing here would keep a stale testbed forever.
	if _, err := os.Stat(c.WorkDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return c.kwokctl(context.WithoutCancel(ctx), nil, "delete", "cluster")
}

// MapExec makes `exec` into the pod run the command on this machine, in workDir, with env added to
// the environment, through kwok's Exec resource. It returns once kwok execs the new way.
func (c *Cluster) MapExec(ctx context.Context, namespace, pod, workDir string, env map[string]string) error {
	var envs []any
	for k, v := range env {
		envs = append(envs, map[string]any{"name": k, "value": v})
	}
	obj := map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
		"metadata": map[string]any{"name": pod, "namespace": namespace},
		"spec":     map[string]any{"execs": []any{map[string]any{"local": map[string]any{"workDir": workDir, "envs": envs}}}},
	}
	// kwok learns of the object through a watch; until then exec fails or runs the old mapping.
	return c.applyAndWait(ctx, execGVR, namespace, obj, func(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface) bool {
		var out bytes.Buffer
		err := kube.Exec(ctx, cfg, kc, kube.ExecRequest{Namespace: namespace, Pod: pod, Command: []string{"pwd"}, Stdout: &out})
		return err == nil && strings.TrimSpace(out.String()) == workDir
	})
}

// MapPortForward makes a port-forward to the pod's port reach host:port on this machine, through
// kwok's PortForward resource. It returns once a forwarded connection stays open, which it does
// only when kwok knows the mapping (for servers that wait for the client to speak first).
func (c *Cluster) MapPortForward(ctx context.Context, namespace, pod string, podPort int, host string, port int) error {
	obj := map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "PortForward",
		"metadata": map[string]any{"name": pod, "namespace": namespace},
		"spec": map[string]any{"forwards": []any{map[string]any{
			"ports":  []any{int64(podPort)},
			"target": map[string]any{"address": host, "port": int64(port)},
		}}},
	}
	return c.applyAndWait(ctx, portForwardGVR, namespace, obj, func(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface) bool {
		addr, stop, err := kube.PortForward(ctx, cfg, kc, namespace, pod, podPort)
		if err != nil {
			return false
		}
		defer stop()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err = conn.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	})
}

// applyAndWait applies a kwok object and polls ready until kwok acts on it.
func (c *Cluster) applyAndWait(ctx context.Context, gvr schema.GroupVersionResource, namespace string, obj map[string]any,
	ready func(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface) bool) error {
	if err := c.apply(ctx, gvr, namespace, obj); err != nil {
		return err
	}
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// kwok caches its list of these objects under the informer's last resource version, which the
	// informer sets before its store holds the object: a lookup in between caches a list without
	// it, kept until the next change of any such object. Each second it is not acted on, the
	// object is written again with a new annotation, which is such a change.
	polls := 0
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if ready(ctx, cfg, kc) {
			return true, nil
		}
		if polls++; polls%20 == 0 {
			meta, _ := obj["metadata"].(map[string]any)
			meta["annotations"] = map[string]any{"testbed.ferry/rewritten": strconv.Itoa(polls / 20)}
			if err := c.apply(ctx, gvr, namespace, obj); err != nil {
				return false, err
			}
		}
		return false, nil
	})
}

func (c *Cluster) apply(ctx context.Context, gvr schema.GroupVersionResource, namespace string, obj map[string]any) error {
	_, dc, err := c.Clients()
	if err != nil {
		return err
	}
	// A copy: an update sets its resource version, which a later create of obj must not have.
	u := (&unstructured.Unstructured{Object: obj}).DeepCopy()
	res := dc.Resource(gvr).Namespace(namespace)
	_, err = res.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := res.Get(ctx, u.GetName(), metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("%s %s/%s on %s: %w", gvr.Resource, namespace, u.GetName(), c.Name, err)
	}
	return nil
}

// Apply server-side applies manifest files to the cluster with the testbed's kubectl, in order,
// waiting after each file that holds CRDs until they are Established, so that the next file's
// custom resources are served.
func (c *Cluster) Apply(ctx context.Context, out io.Writer, files ...string) error {
	for _, f := range files {
		cmd := exec.CommandContext(ctx, c.bins["kubectl"], "--kubeconfig", c.Kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", f)
		var stderr bytes.Buffer
		cmd.Stderr = io.MultiWriter(&stderr, out)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apply %s to %s: %w: %s", f, c.Name, err, stderr.String())
		}
		if data, err := os.ReadFile(f); err != nil || !strings.Contains(string(data), "kind: CustomResourceDefinition") {
			continue
		}
		wait := exec.CommandContext(ctx, c.bins["kubectl"], "--kubeconfig", c.Kubeconfig, "wait", "--for=condition=Established", "crd", "--all", "--timeout=120s")
		if msg, err := wait.CombinedOutput(); err != nil {
			return fmt.Errorf("wait for CRDs on %s: %w: %s", c.Name, err, msg)
		}
	}
	return nil
}

// BindClaim makes a hostPath PersistentVolume on dir for the claim, pre-bound to it, as a
// provisioner would; the controller-manager's binder then marks both Bound and pods using the
// claim get scheduled.
func (c *Cluster) BindClaim(ctx context.Context, namespace, claim, dir string) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	pvc, err := kc.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return err
	}
	name := "pv-" + namespace + "-" + claim
	if len(name) > validation.DNS1123SubdomainMaxLength { // a claim of a long name
		name = "pv-" + string(pvc.UID)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              ptrValue(pvc.Spec.StorageClassName),
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: namespace, Name: claim, UID: pvc.UID},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("persistent volume for %s/%s on %s: %w", namespace, claim, c.Name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := kc.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.ClaimBound, nil
	})
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// moverSelector picks ferry's mover pods (snapshot/volumes labels them so).
const moverSelector = "app.kubernetes.io/name=ferry-mover"

// mapMovers maps the exec of every mover pod to the local folder of the hostPath volume its claim
// is bound to, as a kubelet would mount it, until ctx ends.
func (c *Cluster) mapMovers(ctx context.Context) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kc, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = moverSelector }))
	_, err = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				go c.mapMover(ctx, kc, pod)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
}

func (c *Cluster) mapMover(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) {
	// Every error is tried again: a mover whose exec is never mapped fails its test with only
	// kwok's "no exec found" to show for it, so what kept it unmapped is printed as well.
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		done, err := c.tryMapMover(ctx, kc, pod)
		if err != nil {
			last = err
		}
		return done, nil
	})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "testbed: the exec of mover pod %s/%s on %s is not mapped: %v\n", pod.Namespace, pod.Name, c.Name, errors.Join(err, last))
	}
}

// tryMapMover maps the mover pod's exec to its claim's folder. It is done when the exec is mapped,
// when the pod mounts no hostPath claim, or when the pod is gone; it is not yet done while the
// claim is unbound (a provisioner, WaitForFirstConsumer).
func (c *Cluster) tryMapMover(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod) (bool, error) {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		if _, err := kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return true, nil
		}
		pvc, err := kc.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
		if err != nil || pvc.Spec.VolumeName == "" {
			return false, err
		}
		pv, err := kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if pv.Spec.HostPath == nil {
			return true, nil
		}
		if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
			// A kubelet does not start a pod that mounts a raw block volume as a filesystem.
			fmt.Fprintf(os.Stderr, "testbed: mover pod %s/%s mounts block-mode claim %s as a filesystem: left without exec, as a kubelet would not start it\n",
				pod.Namespace, pod.Name, pvc.Name)
			return true, nil
		}
		if err := c.MapExec(ctx, pod.Namespace, pod.Name, pv.Spec.HostPath.Path, nil); err != nil {
			return false, err
		}
		return true, nil
	}
	return true, nil
}
