package schedule

import (
	"bytes"
	"context"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/schedule.yaml from Build")

func base() Options {
	return Options{Name: "nightly", Namespace: DefaultNamespace, Cron: "0 2 * * *", Image: "ferry:test",
		Storage: "s3://backups/prod?region=eu-west-1", StorageSecret: "ferry-storage", Preset: "kubeflow"}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		flag   string // what the error names; "" for valid options
	}{
		{"valid", func(o *Options) {}, ""},
		{"@daily", func(o *Options) { o.Cron = "@daily" }, ""},
		{"ranges and steps", func(o *Options) { o.Cron = "*/15 1-5 * * MON-FRI" }, ""},
		{"six fields", func(o *Options) { o.Cron = "0 0 2 * * *" }, "--cron"},
		{"a minute out of range", func(o *Options) { o.Cron = "61 2 * * *" }, "--cron"},
		{"words", func(o *Options) { o.Cron = "every night" }, "--cron"},
		{"empty cron", func(o *Options) { o.Cron = "" }, "--cron"},
		{"a time zone", func(o *Options) { o.Cron = "CRON_TZ=Europe/Paris 0 2 * * *" }, "--cron"},
		{"file storage", func(o *Options) { o.Storage = "file://./ferry-backups" }, "--storage"},
		{"upper-case name", func(o *Options) { o.Name = "Nightly" }, "schedule name"},
		{"long name", func(o *Options) { o.Name = strings.Repeat("a", MaxNameLength+1) }, "schedule name"},
		{"name of hand-made backups", func(o *Options) { o.Name = "ferry" }, "schedule name"},
		{"namespace", func(o *Options) { o.Namespace = "Ferry_System" }, "--namespace"},
		{"chunked volumes", func(o *Options) { o.VolumeFormat = "chunks" }, ""},
		{"unknown volume format", func(o *Options) { o.VolumeFormat = "zip" }, "volume format \"zip\""},
		{"chunked volumes, direct", func(o *Options) { o.VolumeFormat, o.MoverDirect = "chunks", true }, "direct movers write tar"},
		{"secret", func(o *Options) { o.StorageSecret = "bad/secret" }, "--storage-secret"},
		{"preset and config", func(o *Options) { o.Config = []byte("preset: kubeflow\n") }, "-f and --preset"},
		{"no image", func(o *Options) { o.Image = "" }, "--image"},
		{"negative run deadline", func(o *Options) { o.ActiveDeadline = -time.Hour }, "--active-deadline"},
		{"a run deadline of seconds", func(o *Options) { o.ActiveDeadline = 5 * time.Second }, "--active-deadline"},
		{"a start deadline under the controller's period", func(o *Options) { o.StartingDeadline = 5 * time.Second }, "--starting-deadline"},
		{"a data namespace", func(o *Options) { o.DataNamespaces = []string{"Bad_NS"} }, "data namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.change(&o)
			err := o.Check()
			if tt.flag == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !badinput.Is(err) || !strings.Contains(err.Error(), tt.flag) {
				t.Fatalf("error %v: want bad input naming %s", err, tt.flag)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		want   []string
	}{
		{"preset", func(o *Options) {}, []string{"--preset", "kubeflow"}},
		{"config file", func(o *Options) { o.Preset, o.Config = "", []byte("preset: kubeflow\n") }, []string{"-f", "/etc/ferry/ferry.yaml"}},
		{"everything", func(o *Options) { o.EncryptTo, o.MoverDirect, o.Parallel = []string{"age1a", "age1b"}, true, 16 },
			[]string{"--preset", "kubeflow", "--encrypt-to", "age1a", "--encrypt-to", "age1b", "--mover-direct", "--parallel", "16"}},
		{"chunked volumes", func(o *Options) { o.VolumeFormat = "chunks" }, []string{"--preset", "kubeflow", "--volume-format", "chunks"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.change(&o)
			want := append([]string{"backup", "--storage", o.Storage, "--log-format", "json", "--progress", "never", "--schedule", "nightly", "--mover-image", "ferry:test"}, tt.want...)
			if got := Args(o); !slices.Equal(got, want) {
				t.Errorf("args\n  %q\nwant\n  %q", got, want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		check  func(t *testing.T, m *Manifests)
	}{
		{"cronjob", func(o *Options) {}, func(t *testing.T, m *Manifests) {
			cj := m.CronJob
			if cj.Name != "nightly" || cj.Namespace != DefaultNamespace || cj.Spec.Schedule != "0 2 * * *" || cj.Spec.ConcurrencyPolicy != "Forbid" {
				t.Errorf("cronjob: %s/%s %q %s", cj.Namespace, cj.Name, cj.Spec.Schedule, cj.Spec.ConcurrencyPolicy)
			}
			pod := cj.Spec.JobTemplate.Spec.Template.Spec
			c := pod.Containers[0]
			if pod.ServiceAccountName != "ferry-schedule-nightly" || pod.RestartPolicy != corev1.RestartPolicyNever || c.Image != "ferry:test" ||
				!slices.Equal(c.Command, []string{"ferry"}) || !slices.Equal(c.Args, Args(base())) {
				t.Errorf("pod: %+v", pod)
			}
			sc := c.SecurityContext
			if !*sc.RunAsNonRoot || *sc.RunAsUser == 0 || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !*pod.SecurityContext.RunAsNonRoot {
				t.Errorf("security context: %+v", sc)
			}
			var secretEnv []string
			for _, e := range c.Env {
				if e.Value != "" && strings.HasPrefix(e.Name, "AWS_") {
					t.Errorf("credential %s inline", e.Name)
				}
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					secretEnv = append(secretEnv, e.Name+"="+e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key)
				}
			}
			if want := []string{"AWS_ACCESS_KEY_ID=ferry-storage/AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY=ferry-storage/AWS_SECRET_ACCESS_KEY"}; !slices.Equal(secretEnv, want) {
				t.Errorf("secret env %v, want %v", secretEnv, want)
			}
			if m.ConfigMap != nil || len(m.Objects()) != 5 {
				t.Errorf("no ConfigMap without -f: %d objects", len(m.Objects()))
			}
		}},
		{"rbac", func(o *Options) { o.Namespace = "backups" }, func(t *testing.T, m *Manifests) {
			crb := m.ClusterRoleBinding
			if m.ClusterRole.Name != "ferry-schedule:backups:nightly" || crb.RoleRef.Name != m.ClusterRole.Name ||
				crb.Subjects[0].Name != m.ServiceAccount.Name || crb.Subjects[0].Namespace != "backups" || m.ServiceAccount.Namespace != "backups" {
				t.Errorf("binding %+v of %s to %s/%s", crb, m.ClusterRole.Name, m.ServiceAccount.Namespace, m.ServiceAccount.Name)
			}
			// Cluster-wide, only reads, of named types: no wildcard (it would match nodes/proxy,
			// pods/proxy, services/proxy) and no subresource.
			if len(m.ClusterRole.Rules) == 0 {
				t.Fatal("no rules")
			}
			for _, r := range m.ClusterRole.Rules {
				if !slices.Equal(r.Verbs, []string{"get", "list"}) || slices.Contains(r.APIGroups, "*") || len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
					t.Errorf("cluster-wide rule %+v does more than read named types", r)
				}
				for _, res := range r.Resources {
					if strings.ContainsAny(res, "*/") {
						t.Errorf("cluster-wide rule %+v reads %s", r, res)
					}
				}
			}
			if len(m.Roles) != 0 {
				t.Errorf("roles without data namespaces: %d", len(m.Roles))
			}
		}},
		{"pods only in data namespaces", func(o *Options) {
			o.Reads = []schema.GroupResource{{Resource: "secrets"}, {Group: "example.com", Resource: "widgets"}, {Resource: "*"}, {Resource: "pods/exec"}, {Resource: "secrets"}}
			o.DataNamespaces = []string{"team-b", "kubeflow", "team-b"}
		}, func(t *testing.T, m *Manifests) {
			want := []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}},
				{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list"}},
			}
			if !reflect.DeepEqual(m.ClusterRole.Rules, want) {
				t.Errorf("cluster role rules %+v, want %+v", m.ClusterRole.Rules, want)
			}
			if len(m.Roles) != 2 || len(m.RoleBindings) != 2 {
				t.Fatalf("%d roles and %d bindings, want one of each in kubeflow and team-b", len(m.Roles), len(m.RoleBindings))
			}
			for i, ns := range []string{"kubeflow", "team-b"} {
				r, b := m.Roles[i], m.RoleBindings[i]
				if r.Namespace != ns || b.Namespace != ns || b.RoleRef.Kind != "Role" || b.RoleRef.Name != r.Name ||
					b.Subjects[0].Name != m.ServiceAccount.Name || b.Subjects[0].Namespace != m.ServiceAccount.Namespace {
					t.Errorf("role %s/%s bound by %+v", r.Namespace, r.Name, b)
				}
				for _, rule := range r.Rules {
					for _, v := range rule.Verbs {
						if v == "*" || v == "update" || v == "patch" || v == "escalate" || v == "bind" || v == "impersonate" {
							t.Errorf("rule %+v grants %s", rule, v)
						}
					}
					if rule.Resources[0] == "secrets" && !slices.Equal(rule.Verbs, []string{"get"}) {
						t.Errorf("secrets in a data namespace: %v", rule.Verbs)
					}
				}
			}
			if objs := m.Objects(); len(objs) != 9 || objs[8] != m.CronJob {
				t.Errorf("the CronJob goes last: %d objects", len(objs))
			}
		}},
		{"deadlines", func(o *Options) {}, func(t *testing.T, m *Manifests) {
			if d := m.CronJob.Spec.StartingDeadlineSeconds; d == nil || *d != 3600 {
				t.Errorf("startingDeadlineSeconds %v, want 3600", d)
			}
			if d := m.CronJob.Spec.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d != 6*3600 {
				t.Errorf("activeDeadlineSeconds %v, want 21600", d)
			}
		}},
		{"deadlines given", func(o *Options) { o.ActiveDeadline, o.StartingDeadline = 90*time.Minute, 5*time.Minute }, func(t *testing.T, m *Manifests) {
			if d := m.CronJob.Spec.StartingDeadlineSeconds; d == nil || *d != 300 {
				t.Errorf("startingDeadlineSeconds %v, want 300", d)
			}
			if d := m.CronJob.Spec.JobTemplate.Spec.ActiveDeadlineSeconds; d == nil || *d != 5400 {
				t.Errorf("activeDeadlineSeconds %v, want 5400", d)
			}
		}},
		{"config map", func(o *Options) { o.Preset, o.Config = "", []byte("preset: kubeflow\n") }, func(t *testing.T, m *Manifests) {
			if m.ConfigMap == nil || m.ConfigMap.Data[ConfigFile] != "preset: kubeflow\n" || m.ConfigMap.Name != "ferry-schedule-nightly" {
				t.Fatalf("config map: %+v", m.ConfigMap)
			}
			pod := m.CronJob.Spec.JobTemplate.Spec.Template.Spec
			if pod.Volumes[1].ConfigMap.Name != m.ConfigMap.Name || pod.Containers[0].VolumeMounts[1].MountPath != ConfigDir || !pod.Containers[0].VolumeMounts[1].ReadOnly {
				t.Errorf("mount: %+v %+v", pod.Volumes, pod.Containers[0].VolumeMounts)
			}
			if objs := m.Objects(); len(objs) != 6 || objs[5] != m.CronJob {
				t.Errorf("the CronJob goes last: %d objects", len(objs))
			}
		}},
		{"no secret", func(o *Options) { o.StorageSecret = "" }, func(t *testing.T, m *Manifests) {
			for _, e := range m.CronJob.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Env {
				if strings.HasPrefix(e.Name, "AWS_") {
					t.Errorf("env %s without a secret", e.Name)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := base()
			tt.change(&o)
			m, err := Build(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, obj := range m.Objects() {
				meta := obj.(metav1.Object)
				if meta.GetName() != o.Namespace && meta.GetLabels()[ScheduleLabel] != "nightly" {
					t.Errorf("%T %s is not labelled", obj, meta.GetName())
				}
			}
			tt.check(t, m)
		})
	}
}

// deploy/schedule.yaml is what Build makes for its documented options, with its comments.
func TestDeployManifests(t *testing.T) {
	m, err := Build(Options{Name: "nightly", Namespace: DefaultNamespace, Cron: "0 2 * * *", Image: ImageRepository + ":latest",
		Storage: "s3://ferry-backups/prod?region=eu-west-1", StorageSecret: "ferry-storage", Preset: "kubeflow", DataNamespaces: []string{"kubeflow"}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	const file = "../deploy/schedule.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// The file's own comments are the documentation: compare what is not a comment.
	var got [][]byte
	var header [][]byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		if bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			if len(got) == 0 {
				header = append(header, line)
			}
			continue
		}
		got = append(got, line)
	}
	if !bytes.Equal(bytes.Join(got, []byte("\n")), want) {
		if *update {
			out := append(bytes.Join(header, []byte("\n")), '\n')
			if err := os.WriteFile(file, append(out, want...), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s differs from Build's output; go test ./schedule -run TestDeployManifests -update rewrites it (keeping its header comment)", file)
	}
	// And it is valid YAML, document by document.
	for _, doc := range strings.Split(string(want), "---\n") {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(doc), &v); err != nil || v["kind"] == nil {
			t.Errorf("document %q: %v", doc, err)
		}
	}
}

func TestApplyListDelete(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	o := base()
	o.Preset, o.Config = "", []byte("preset: kubeflow\n")
	o.DataNamespaces = []string{"kubeflow"}
	m, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	// A schedule of the same name in another namespace has its own Role there, left alone.
	elsewhere := base()
	elsewhere.Namespace, elsewhere.DataNamespaces = "backups", []string{"kubeflow"}
	me, _ := Build(elsewhere)
	if _, err := client.RbacV1().Roles("kubeflow").Create(ctx, me.Roles[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done, err := Apply(ctx, client, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 8 || done[0] != "namespace/ferry-system created" || done[4] != "role/kubeflow/ferry-schedule:ferry-system:nightly created" || done[7] != "cronjob/nightly created" {
		t.Errorf("apply: %q", done)
	}
	if _, err := Apply(ctx, client, m); !badinput.Is(err) {
		t.Errorf("a second create: %v, want bad input", err)
	}
	infos, err := List(ctx, client, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != "nightly" || infos[0].Cron != "0 2 * * *" || infos[0].Storage != o.Storage || infos[0].Suspended {
		t.Errorf("list: %+v", infos)
	}

	// A ServiceAccount of the same name that is not the schedule's is never taken over.
	other := base()
	other.Name = "hourly"
	mo, _ := Build(other)
	foreign := mo.ServiceAccount.DeepCopy()
	foreign.Labels = nil
	if _, err := client.CoreV1().ServiceAccounts(DefaultNamespace).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, client, mo); !badinput.Is(err) || !strings.Contains(err.Error(), "is not schedule hourly's") {
		t.Errorf("a foreign ServiceAccount: %v", err)
	}

	done, err = Delete(ctx, client, DefaultNamespace, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 7 || !slices.Contains(done, "rolebinding/kubeflow/ferry-schedule:ferry-system:nightly deleted") || !slices.Contains(done, "role/kubeflow/ferry-schedule:ferry-system:nightly deleted") {
		t.Errorf("delete: %q", done)
	}
	if _, err := client.RbacV1().Roles("kubeflow").Get(ctx, me.Roles[0].Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the other schedule's Role: %v", err)
	}
	if infos, _ := List(ctx, client, DefaultNamespace); len(infos) != 0 {
		t.Errorf("after delete: %+v", infos)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, DefaultNamespace, metav1.GetOptions{}); err != nil {
		t.Errorf("the namespace stays: %v", err)
	}
	if _, err := Delete(ctx, client, DefaultNamespace, "nightly"); !badinput.Is(err) {
		t.Errorf("deleting again: %v, want bad input", err)
	}
	if _, err := Delete(ctx, client, DefaultNamespace, "hourly"); !badinput.Is(err) || !strings.Contains(err.Error(), "left alone") {
		t.Errorf("deleting a foreign ServiceAccount: %v", err)
	}
}
