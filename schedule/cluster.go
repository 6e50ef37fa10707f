package schedule

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Apply creates a schedule's objects in the cluster, the CronJob last: the namespace when it is
// missing; the others, or, when one is already there and is this schedule's (its labels say
// so, left by an interrupted create), an update of it. A CronJob of that name already there is
// bad input, as is any other object of the same name that is not this schedule's. It returns
// what it did, one line per object.
func Apply(ctx context.Context, client kubernetes.Interface, m *Manifests) ([]string, error) {
	ns, name := m.CronJob.Namespace, m.CronJob.Name
	if _, err := client.BatchV1().CronJobs(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		return nil, badinput.Errorf("schedule %s already exists in namespace %s: ferry schedule delete %s -n %s first", name, ns, name, ns)
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("cronjob %s/%s: %w", ns, name, err)
	}
	var done []string
	if _, err := client.CoreV1().Namespaces().Create(ctx, m.Namespace, metav1.CreateOptions{}); err == nil {
		done = append(done, "namespace/"+ns+" created")
	} else if !apierrors.IsAlreadyExists(err) {
		return done, fmt.Errorf("namespace %s: %w", ns, err)
	}
	steps := []struct {
		kind, name string
		create     func() error
		get        func() (metav1.Object, error)
		update     func(resourceVersion string) error
	}{
		{"serviceaccount", m.ServiceAccount.Name,
			func() error {
				_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, m.ServiceAccount, metav1.CreateOptions{})
				return err
			},
			func() (metav1.Object, error) {
				return client.CoreV1().ServiceAccounts(ns).Get(ctx, m.ServiceAccount.Name, metav1.GetOptions{})
			},
			func(rv string) error {
				o := m.ServiceAccount.DeepCopy()
				o.ResourceVersion = rv
				_, err := client.CoreV1().ServiceAccounts(ns).Update(ctx, o, metav1.UpdateOptions{})
				return err
			}},
		{"clusterrole", m.ClusterRole.Name,
			func() error {
				_, err := client.RbacV1().ClusterRoles().Create(ctx, m.ClusterRole, metav1.CreateOptions{})
				return err
			},
			func() (metav1.Object, error) {
				return client.RbacV1().ClusterRoles().Get(ctx, m.ClusterRole.Name, metav1.GetOptions{})
			},
			func(rv string) error {
				o := m.ClusterRole.DeepCopy()
				o.ResourceVersion = rv
				_, err := client.RbacV1().ClusterRoles().Update(ctx, o, metav1.UpdateOptions{})
				return err
			}},
		{"clusterrolebinding", m.ClusterRoleBinding.Name,
			func() error {
				_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, m.ClusterRoleBinding, metav1.CreateOptions{})
				return err
			},
			func() (metav1.Object, error) {
				return client.RbacV1().ClusterRoleBindings().Get(ctx, m.ClusterRoleBinding.Name, metav1.GetOptions{})
			},
			func(rv string) error {
				// A binding's roleRef cannot change; ours is always the same.
				o := m.ClusterRoleBinding.DeepCopy()
				o.ResourceVersion = rv
				_, err := client.RbacV1().ClusterRoleBindings().Update(ctx, o, metav1.UpdateOptions{})
				return err
			}},
	}
	type step = struct {
		kind, name string
		create     func() error
		get        func() (metav1.Object, error)
		update     func(resourceVersion string) error
	}
	for i, role := range m.Roles {
		binding := m.RoleBindings[i]
		roles, bindings := client.RbacV1().Roles(role.Namespace), client.RbacV1().RoleBindings(binding.Namespace)
		steps = append(steps, step{"role", role.Namespace + "/" + role.Name,
			func() error {
				_, err := roles.Create(ctx, role, metav1.CreateOptions{})
				return err
			},
			func() (metav1.Object, error) {
				return getObj[*rbacv1.Role](roles.Get(ctx, role.Name, metav1.GetOptions{}))
			},
			func(rv string) error {
				o := role.DeepCopy()
				o.ResourceVersion = rv
				_, err := roles.Update(ctx, o, metav1.UpdateOptions{})
				return err
			}}, step{"rolebinding", binding.Namespace + "/" + binding.Name,
			func() error {
				_, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
				return err
			},
			func() (metav1.Object, error) {
				return getObj[*rbacv1.RoleBinding](bindings.Get(ctx, binding.Name, metav1.GetOptions{}))
			},
			func(rv string) error {
				o := binding.DeepCopy()
				o.ResourceVersion = rv
				_, err := bindings.Update(ctx, o, metav1.UpdateOptions{})
				return err
			}})
	}
	if m.ConfigMap != nil {
		steps = append(steps, struct {
			kind, name string
			create     func() error
			get        func() (metav1.Object, error)
			update     func(resourceVersion string) error
		}{"configmap", m.ConfigMap.Name,
			func() error {
				_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, m.ConfigMap, metav1.CreateOptions{})
				return err
			},
			func() (metav1.Object, error) {
				return client.CoreV1().ConfigMaps(ns).Get(ctx, m.ConfigMap.Name, metav1.GetOptions{})
			},
			func(rv string) error {
				o := m.ConfigMap.DeepCopy()
				o.ResourceVersion = rv
				_, err := client.CoreV1().ConfigMaps(ns).Update(ctx, o, metav1.UpdateOptions{})
				return err
			}})
	}
	for _, s := range steps {
		err := s.create()
		if err == nil {
			done = append(done, s.kind+"/"+s.name+" created")
			continue
		}
		if !apierrors.IsAlreadyExists(err) {
			return done, fmt.Errorf("%s %s: %w", s.kind, s.name, err)
		}
		existing, err := s.get()
		if err != nil {
			return done, fmt.Errorf("%s %s: %w", s.kind, s.name, err)
		}
		if existing.GetLabels()[ScheduleLabel] != name || existing.GetLabels()[ManagedByLabel] != ManagedBy {
			return done, badinput.Errorf("%s %s exists and is not schedule %s's: remove it or choose another schedule name", s.kind, s.name, name)
		}
		if err := s.update(existing.GetResourceVersion()); err != nil {
			return done, fmt.Errorf("%s %s: %w", s.kind, s.name, err)
		}
		done = append(done, s.kind+"/"+s.name+" updated")
	}
	if _, err := client.BatchV1().CronJobs(ns).Create(ctx, m.CronJob, metav1.CreateOptions{}); err != nil {
		return done, fmt.Errorf("cronjob %s/%s: %w", ns, name, err)
	}
	return append(done, "cronjob/"+name+" created"), nil
}

// Info is a schedule as List finds it.
type Info struct {
	Name        string     `json:"name"`
	Namespace   string     `json:"namespace"`
	Cron        string     `json:"cron"`
	Suspended   bool       `json:"suspended"`
	Storage     string     `json:"storage"`
	Active      int        `json:"active"`
	LastRun     *time.Time `json:"lastRun,omitempty"`
	LastSuccess *time.Time `json:"lastSuccess,omitempty"`
}

// List finds ferry's schedules in a namespace ("" for all), by name.
func List(ctx context.Context, client kubernetes.Interface, namespace string) ([]Info, error) {
	list, err := client.BatchV1().CronJobs(namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector("")})
	if err != nil {
		return nil, fmt.Errorf("list cronjobs: %w", err)
	}
	out := make([]Info, 0, len(list.Items))
	for _, cj := range list.Items {
		info := Info{Name: cj.Name, Namespace: cj.Namespace, Cron: cj.Spec.Schedule, Suspended: ptr.Deref(cj.Spec.Suspend, false),
			Storage: cj.Annotations[StorageAnnotation], Active: len(cj.Status.Active)}
		if t := cj.Status.LastScheduleTime; t != nil {
			info.LastRun = ptr.To(t.UTC())
		}
		if t := cj.Status.LastSuccessfulTime; t != nil {
			info.LastSuccess = ptr.To(t.UTC())
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Delete removes what Apply made for a schedule: the CronJob (with its Jobs and their pods),
// the ConfigMap, the RoleBindings and Roles of the data namespaces, the ClusterRoleBinding, the
// ClusterRole and the ServiceAccount; each only when
// its labels say it is that schedule's. The namespace stays: it may hold other things. A
// schedule with none of these is bad input. It returns what it deleted, one line per object.
func Delete(ctx context.Context, client kubernetes.Interface, namespace, name string) ([]string, error) {
	ours := func(o metav1.Object) bool {
		return o.GetLabels()[ScheduleLabel] == name && o.GetLabels()[ManagedByLabel] == ManagedBy
	}
	var done []string
	var errs []error
	del := func(kind, objName string, get func() (metav1.Object, error), remove func() error) {
		o, err := get()
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", kind, objName, err))
			return
		}
		if !ours(o) {
			errs = append(errs, badinput.Errorf("%s %s is not schedule %s's (its labels say otherwise): left alone", kind, objName, name))
			return
		}
		if err := remove(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s: %w", kind, objName, err))
			return
		}
		done = append(done, kind+"/"+objName+" deleted")
	}
	background := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	cjs, cms, sas := client.BatchV1().CronJobs(namespace), client.CoreV1().ConfigMaps(namespace), client.CoreV1().ServiceAccounts(namespace)
	crbs, crs := client.RbacV1().ClusterRoleBindings(), client.RbacV1().ClusterRoles()
	res, cluster := ResourceName(name), ClusterResourceName(namespace, name)
	del("cronjob", name, func() (metav1.Object, error) {
		return getObj[*batchv1.CronJob](cjs.Get(ctx, name, metav1.GetOptions{}))
	},
		func() error { return cjs.Delete(ctx, name, background) })
	del("configmap", res, func() (metav1.Object, error) {
		return getObj[*corev1.ConfigMap](cms.Get(ctx, res, metav1.GetOptions{}))
	},
		func() error { return cms.Delete(ctx, res, metav1.DeleteOptions{}) })
	// The Roles and RoleBindings in the data namespaces, found by their labels and name.
	bindings, err := client.RbacV1().RoleBindings("").List(ctx, metav1.ListOptions{LabelSelector: Selector(name)})
	if err != nil {
		errs = append(errs, fmt.Errorf("list rolebindings: %w", err))
	} else {
		for _, b := range bindings.Items {
			if b.Name == cluster {
				rbs := client.RbacV1().RoleBindings(b.Namespace)
				del("rolebinding", b.Namespace+"/"+b.Name, func() (metav1.Object, error) {
					return getObj[*rbacv1.RoleBinding](rbs.Get(ctx, b.Name, metav1.GetOptions{}))
				}, func() error { return rbs.Delete(ctx, b.Name, metav1.DeleteOptions{}) })
			}
		}
	}
	roles, err := client.RbacV1().Roles("").List(ctx, metav1.ListOptions{LabelSelector: Selector(name)})
	if err != nil {
		errs = append(errs, fmt.Errorf("list roles: %w", err))
	} else {
		for _, r := range roles.Items {
			if r.Name == cluster {
				rs := client.RbacV1().Roles(r.Namespace)
				del("role", r.Namespace+"/"+r.Name, func() (metav1.Object, error) {
					return getObj[*rbacv1.Role](rs.Get(ctx, r.Name, metav1.GetOptions{}))
				}, func() error { return rs.Delete(ctx, r.Name, metav1.DeleteOptions{}) })
			}
		}
	}
	del("clusterrolebinding", cluster, func() (metav1.Object, error) {
		return getObj[*rbacv1.ClusterRoleBinding](crbs.Get(ctx, cluster, metav1.GetOptions{}))
	}, func() error { return crbs.Delete(ctx, cluster, metav1.DeleteOptions{}) })
	del("clusterrole", cluster, func() (metav1.Object, error) {
		return getObj[*rbacv1.ClusterRole](crs.Get(ctx, cluster, metav1.GetOptions{}))
	},
		func() error { return crs.Delete(ctx, cluster, metav1.DeleteOptions{}) })
	del("serviceaccount", res, func() (metav1.Object, error) {
		return getObj[*corev1.ServiceAccount](sas.Get(ctx, res, metav1.GetOptions{}))
	}, func() error { return sas.Delete(ctx, res, metav1.DeleteOptions{}) })
	if err := errors.Join(errs...); err != nil {
		return done, err
	}
	if len(done) == 0 {
		return nil, badinput.Errorf("no schedule %s in namespace %s (see ferry schedule list)", name, namespace)
	}
	return done, nil
}

// getObj turns a typed Get's result into a metav1.Object; a nil pointer on error stays an error.
func getObj[T metav1.Object](o T, err error) (metav1.Object, error) {
	if err != nil {
		return nil, err
	}
	return o, nil
}
