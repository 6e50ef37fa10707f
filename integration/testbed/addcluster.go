package testbed

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// AddCluster creates one more cluster in a running testbed — a fresh cluster that has never seen
// any other, as a disaster recovery restores into — with the same mappings as the others. Stop
// deletes it with the rest.
func (tb *Testbed) AddCluster(ctx context.Context, name string) (*Cluster, error) {
	if _, ok := tb.Clusters[name]; ok {
		return nil, fmt.Errorf("testbed: a cluster named %s already runs", name)
	}
	c, err := createCluster(ctx, tb.Bins, tb.Dir, name, 2, tb.ExecBin)
	if c != nil {
		tb.Clusters[name] = c
	}
	if err == nil {
		err = tb.writeKubeconfig()
	}
	if err == nil {
		err = tb.save()
	}
	if err != nil {
		// A cluster that did not come up is removed, so that a later test adds it anew rather
		// than finding a broken one under its name.
		if c != nil {
			if derr := c.delete(ctx); derr != nil {
				err = errors.Join(err, fmt.Errorf("remove it: %w", derr))
			}
			delete(tb.Clusters, name)
			if werr := tb.writeKubeconfig(); werr == nil {
				tb.save()
			}
		}
		return nil, fmt.Errorf("testbed: add cluster %s: %w", name, err)
	}
	watchCtx := tb.watchContext(c)
	if err := c.mapMovers(watchCtx); err != nil {
		return nil, err
	}
	if err := c.provision(watchCtx, filepath.Join(tb.Dir, "data", "provisioned-"+name)); err != nil {
		return nil, err
	}
	return c, nil
}

// watchContext is a context for watchers of c started after Start, cancelled by Stop or by
// RemoveCluster of c.
func (tb *Testbed) watchContext(c *Cluster) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	chain := func(previous context.CancelFunc) context.CancelFunc {
		return func() {
			cancel()
			if previous != nil {
				previous()
			}
		}
	}
	tb.stopWatchers, c.stopWatchers = chain(tb.stopWatchers), chain(c.stopWatchers)
	return ctx
}

// RemoveCluster ends a cluster added with AddCluster, its watchers, and the servers of its name
// (AddServers): an idle kwok cluster still takes a tenth of a core, and late in a test run the
// clusters of finished tests slowed every later one.
func (tb *Testbed) RemoveCluster(ctx context.Context, name string) error {
	c, ok := tb.Clusters[name]
	if !ok {
		return nil
	}
	if c.stopWatchers != nil {
		c.stopWatchers()
	}
	var errs []error
	if err := c.delete(ctx); err != nil {
		errs = append(errs, err)
	}
	delete(tb.Clusters, name)
	if m := tb.MinIO[name]; m != nil {
		errs = append(errs, m.Process.stop(10*time.Second))
		delete(tb.MinIO, name)
	}
	if d := tb.MariaDB[name]; d != nil {
		errs = append(errs, d.Process.stop(30*time.Second))
		delete(tb.MariaDB, name)
	}
	errs = append(errs, tb.writeKubeconfig(), tb.save())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("testbed: remove cluster %s: %w", name, err)
	}
	return nil
}

// ServeExec maps the exec of every pod of the cluster that matches the label selector in the
// namespace, now and later, to a local folder and environment — as if the pod ran there: the
// platform's database pods, on any cluster, are then served by a testbed server. It lasts until Stop.
func (tb *Testbed) ServeExec(c *Cluster, namespace, selector, workDir string, env map[string]string) error {
	ctx := tb.watchContext(c)
	return c.onPods(ctx, namespace, selector, func(pod *corev1.Pod) {
		c.MapExec(ctx, pod.Namespace, pod.Name, workDir, env)
	})
}

// ServePortForward forwards podPort of every pod that matches, now and later, to host:port: the
// platform's MinIO pods served by a testbed MinIO. It lasts until Stop.
func (tb *Testbed) ServePortForward(c *Cluster, namespace, selector string, podPort int, host string, port int) error {
	ctx := tb.watchContext(c)
	return c.onPods(ctx, namespace, selector, func(pod *corev1.Pod) {
		c.MapPortForward(ctx, pod.Namespace, pod.Name, podPort, host, port)
	})
}

// onPods calls fn (in a goroutine of its own) for every pod matching selector in namespace.
func (c *Cluster) onPods(ctx context.Context, namespace, selector string, fn func(*corev1.Pod)) error {
	kc, _, err := c.Clients()
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	_, err = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				go fn(pod)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	return nil
}

// AddServers starts one more MariaDB and MinIO in a running testbed, named name: the servers of
// a cluster added with AddCluster whose platform pods they serve (SeedMySQL, ServePlatform take
// them by the cluster's name). Stop ends them with the rest. Servers of that name already
// running are kept.
func (tb *Testbed) AddServers(ctx context.Context, name string) error {
	if tb.MariaDB[name] == nil {
		d, err := startMariaDB(ctx, tb.Bins, tb.Dir, name)
		if d != nil {
			tb.MariaDB[name] = d
		}
		if err != nil {
			return fmt.Errorf("testbed: add MariaDB %s: %w", name, err)
		}
	}
	if tb.MinIO[name] == nil {
		m, err := startMinIO(ctx, tb.Bins, tb.Dir, name, false)
		if m != nil {
			tb.MinIO[name] = m
		}
		if err != nil {
			return fmt.Errorf("testbed: add MinIO %s: %w", name, err)
		}
	}
	return tb.save()
}

// SetPlatformCredentials puts the credentials of the servers named servers into the platform's
// Secrets of c (mysql-secret, mlpipeline-minio-artifact), as a release installed there with its
// own database and MinIO holds them.
func (tb *Testbed) SetPlatformCredentials(ctx context.Context, c *Cluster, servers string) error {
	db, m := tb.MariaDB[servers], tb.MinIO[servers]
	if db == nil || m == nil {
		return fmt.Errorf("platform credentials on %s: the testbed has no MariaDB and MinIO named %s", c.Name, servers)
	}
	if err := c.setSecret(ctx, platformNamespace, "mysql-secret", map[string][]byte{"username": []byte(db.User), "password": []byte(db.Password)}); err != nil {
		return err
	}
	if err := c.setSecret(ctx, platformNamespace, "mlpipeline-minio-artifact", map[string][]byte{"accesskey": []byte(m.AccessKey), "secretkey": []byte(m.SecretKey)}); err != nil {
		return err
	}
	return m.CreateBucket(ctx, PlatformBucket)
}
