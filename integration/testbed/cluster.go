package testbed

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is a kwok cluster with a real kube-apiserver, etcd, controller-manager and scheduler.
type Cluster struct {
	Name string `json:"name"`
	// Kubeconfig holds only this cluster, as context Name.
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`

	workDir string
	bins    Binaries
}

var (
	execGVR        = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "execs"}
	portForwardGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "portforwards"}
)

func (c *Cluster) kwokctl(ctx context.Context, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bins["kwokctl"], append([]string{"--name", c.Name}, args...)...)
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.workDir)
	log, err := os.OpenFile(filepath.Join(c.workDir, "kwokctl-"+c.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
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
		return fmt.Errorf("kwokctl %v for cluster %s: %w (log %s)", args, c.Name, err, log.Name())
	}
	return nil
}

func createCluster(ctx context.Context, bins Binaries, dir, name string, nodes int) (*Cluster, error) {
	c := &Cluster{Name: name, workDir: filepath.Join(dir, "kwok"), bins: bins, Kubeconfig: filepath.Join(dir, name+".kubeconfig")}
	if err := os.MkdirAll(c.workDir, 0o755); err != nil {
		return nil, err
	}
	err := c.kwokctl(ctx, nil, "create", "cluster", "--runtime", "binary",
		"--kubeconfig", filepath.Join(dir, "kwokctl.kubeconfig"),
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
	if err != nil {
		return nil, err
	}
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}
	if nodes > 0 {
		if err := c.kwokctl(ctx, nil, "scale", "node", "--replicas", strconv.Itoa(nodes)); err != nil {
			return nil, err
		}
	}
	if err := c.waitReady(ctx, nodes); err != nil {
		return nil, err
	}
	return c, nil
}

// writeKubeconfig stores the cluster's kubeconfig with its context, cluster and user named after it.
func (c *Cluster) writeKubeconfig() error {
	cmd := exec.Command(c.bins["kwokctl"], "--name", c.Name, "get", "kubeconfig")
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+c.workDir)
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
	deadline := time.Now().Add(2 * time.Minute)
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
	return c.kwokctl(ctx, nil, "delete", "cluster")
}

// MapExec makes `exec` into the pod run the command on this machine, in workDir, with env added to
// the environment, through kwok's Exec resource.
func (c *Cluster) MapExec(ctx context.Context, namespace, pod, workDir string, env map[string]string) error {
	var envs []any
	for k, v := range env {
		envs = append(envs, map[string]any{"name": k, "value": v})
	}
	obj := map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
		"metadata": map[string]any{"name": pod, "namespace": namespace},
		"spec": map[string]any{"execs": []any{map[string]any{"local": map[string]any{"workDir": workDir, "envs": envs}}}},
	}
	return c.apply(ctx, execGVR, namespace, obj)
}

// MapPortForward makes a port-forward to the pod's port reach address (host:port) on this machine,
// through kwok's PortForward resource.
func (c *Cluster) MapPortForward(ctx context.Context, namespace, pod string, podPort int, host string, port int) error {
	obj := map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "PortForward",
		"metadata": map[string]any{"name": pod, "namespace": namespace},
		"spec": map[string]any{"forwards": []any{map[string]any{
			"ports":  []any{int64(podPort)},
			"target": map[string]any{"address": host, "port": int64(port)},
		}}},
	}
	return c.apply(ctx, portForwardGVR, namespace, obj)
}

func (c *Cluster) apply(ctx context.Context, gvr schema.GroupVersionResource, namespace string, obj map[string]any) error {
	_, dc, err := c.Clients()
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
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
