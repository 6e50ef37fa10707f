// Package schedule makes the in-cluster pieces of a scheduled backup: a CronJob that runs
// `ferry backup` with in-cluster credentials, its ServiceAccount, least-privilege RBAC (reads cluster-wide, pods only in the
// plan's data namespaces) and,
// for a ferry.yaml, a ConfigMap. Building the manifests is plain functions of Options; Apply, List
// and Delete put them into a cluster, find them and take them out again.
package schedule

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/snapshot"
	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Labels every object of a schedule carries; List and Delete find them by these.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "ferry"
	NameLabel      = "app.kubernetes.io/name"
	Name           = "ferry-schedule"
	ScheduleLabel  = "ferry.dev/schedule"
	// StorageAnnotation records on the CronJob where its backups go (URLs hold no credentials).
	StorageAnnotation = "ferry.dev/storage"
)

// DefaultNamespace holds the schedules unless told otherwise.
const DefaultNamespace = "ferry-system"

// ImageRepository is the ferry image; its tag is the version of the ferry that makes the schedule.
const ImageRepository = "ghcr.io/ferrykube/ferry"

// Where the job finds what it needs.
const (
	ConfigDir  = "/etc/ferry"
	ConfigFile = "ferry.yaml"
	// The Secret --storage-secret names holds the S3 credentials under these keys.
	AccessKeyKey = "AWS_ACCESS_KEY_ID"
	SecretKeyKey = "AWS_SECRET_ACCESS_KEY"
	// ContainerName is the job's one container.
	ContainerName = "ferry"
	// UID is the image's non-root user.
	UID = 65532
)

// Options describe one schedule.
type Options struct {
	Name      string
	Namespace string
	// Cron is a standard five-field expression (or @daily, @hourly, ...), in the controller
	// manager's time zone.
	Cron  string
	Image string
	// Storage is where backups go: an s3:// URL reachable from the cluster.
	Storage string
	// StorageSecret names a Secret in Namespace with AccessKeyKey and SecretKeyKey; empty when the
	// pod gets S3 credentials another way (a web identity on its ServiceAccount, say).
	StorageSecret string
	// ServiceAccountAnnotations go on the ServiceAccount (eks.amazonaws.com/role-arn, ...).
	ServiceAccountAnnotations map[string]string
	// Backup flags, passed on to ferry backup.
	Preset      string
	Config      []byte // a ferry.yaml, kept in a ConfigMap
	EncryptTo   []string
	MoverDirect bool
	// VolumeFormat is ferry backup's --volume-format; its default when empty.
	VolumeFormat string
	Parallel     int
	Suspend      bool
	// Reads are the resource types the job may get and list, cluster-wide: those a backup of the
	// cluster reads (plans.Readable); empty means BuiltinReads.
	Reads []schema.GroupResource
	// DataNamespaces are where the plan's claims, databases and buckets live: the only
	// namespaces where the job may create, exec into, port-forward to and delete pods.
	DataNamespaces []string
	// ActiveDeadline bounds one run; StartingDeadline is how late a missed run may still start.
	// Zero means DefaultActiveDeadline and DefaultStartingDeadline.
	ActiveDeadline, StartingDeadline time.Duration
}

// Defaults of the CronJob's deadlines: under concurrencyPolicy Forbid one stuck run would block
// every later one, so a run ends after ActiveDeadline; a run missed (the controller down, say)
// starts within StartingDeadline or waits for the next.
const (
	DefaultActiveDeadline   = 6 * time.Hour
	DefaultStartingDeadline = time.Hour
)

var validName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// MaxNameLength keeps the names derived from a schedule's within Kubernetes' limits: the CronJob
// (52, its Jobs add 11 characters) and its backups (<name>-YYYYMMDD-HHMMSS, 63).
const MaxNameLength = 47

// CheckName rejects names that cannot name a schedule.
func CheckName(name string) error {
	switch {
	case !validName.MatchString(name) || len(name) > MaxNameLength:
		return badinput.Errorf("schedule name %q: use lower-case letters, digits and '-', at most %d, starting and ending with a letter or digit", name, MaxNameLength)
	case name == "ferry":
		return badinput.Errorf("schedule name %q: ferry-YYYYMMDD-HHMMSS names the backups made by hand", name)
	}
	return nil
}

// CheckCron validates a cron expression as the CronJob controller reads it.
func CheckCron(expr string) error {
	if strings.Contains(expr, "TZ") {
		return badinput.Errorf("--cron %q: a time zone is not part of the expression; the schedule runs in the controller manager's time zone", expr)
	}
	if _, err := cron.ParseStandard(expr); err != nil {
		return badinput.Errorf("--cron %q: %v (want five fields, minute hour day-of-month month day-of-week, e.g. \"0 2 * * *\", or @daily)", expr, err)
	}
	return nil
}

// Check validates the options, naming the flag at fault.
func (o Options) Check() error {
	if err := CheckName(o.Name); err != nil {
		return err
	}
	if o.Namespace == "" || !validName.MatchString(o.Namespace) || len(o.Namespace) > 63 {
		return badinput.Errorf("--namespace %q: not a namespace name", o.Namespace)
	}
	if err := CheckCron(o.Cron); err != nil {
		return err
	}
	if _, err := snapshot.ChunkedVolumes(o.VolumeFormat, o.MoverDirect, len(o.EncryptTo) > 0); err != nil {
		return err
	}
	if !strings.HasPrefix(o.Storage, "s3://") {
		return badinput.Errorf("--storage %q: a schedule needs s3:// storage that the cluster reaches; a folder inside the job's pod is gone when it ends", o.Storage)
	}
	if o.Image == "" {
		return badinput.Errorf("--image: empty")
	}
	if o.StorageSecret != "" && (!validSecret.MatchString(o.StorageSecret) || len(o.StorageSecret) > 253) {
		return badinput.Errorf("--storage-secret %q: not a Secret name", o.StorageSecret)
	}
	if o.Preset != "" && len(o.Config) > 0 {
		return badinput.Errorf("-f and --preset: give one (a ferry.yaml can say preset: itself)")
	}
	if o.Parallel < 0 {
		return badinput.Errorf("--parallel %d: want 1 or more", o.Parallel)
	}
	if o.ActiveDeadline < 0 || (o.ActiveDeadline > 0 && o.ActiveDeadline < time.Minute) {
		return badinput.Errorf("--active-deadline %s: want a minute or more", o.ActiveDeadline)
	}
	// The CronJob controller checks every 10 seconds: a shorter deadline may miss every run.
	if o.StartingDeadline < 0 || (o.StartingDeadline > 0 && o.StartingDeadline < 10*time.Second) {
		return badinput.Errorf("--starting-deadline %s: want 10s or more", o.StartingDeadline)
	}
	for _, ns := range o.DataNamespaces {
		if !validName.MatchString(ns) || len(ns) > 63 {
			return badinput.Errorf("data namespace %q: not a namespace name", ns)
		}
	}
	return nil
}

var validSecret = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// ResourceName names the ServiceAccount and ConfigMap of a schedule.
func ResourceName(name string) string { return "ferry-schedule-" + name }

// ClusterResourceName names the ClusterRole and ClusterRoleBinding of a schedule: cluster-wide,
// so they carry the namespace too.
func ClusterResourceName(namespace, name string) string {
	return "ferry-schedule:" + namespace + ":" + name
}

// Labels are those of every object of the schedule.
func Labels(name string) map[string]string {
	return map[string]string{ManagedByLabel: ManagedBy, NameLabel: Name, ScheduleLabel: name}
}

// Selector selects the objects of one schedule, or of every schedule when name is empty.
func Selector(name string) string {
	s := ManagedByLabel + "=" + ManagedBy + "," + NameLabel + "=" + Name
	if name != "" {
		s += "," + ScheduleLabel + "=" + name
	}
	return s
}

// BuiltinReads are the built-in types a backup reads, for manifests made without the cluster
// (a dry run that cannot reach it): a cluster's custom resources and any type it serves beyond
// these need the cluster's own list, plans.Readable, which create uses.
var BuiltinReads = []schema.GroupResource{
	{Resource: "configmaps"}, {Resource: "endpoints"}, {Resource: "limitranges"}, {Resource: "namespaces"}, {Resource: "persistentvolumeclaims"},
	{Resource: "persistentvolumes"}, {Resource: "pods"}, {Resource: "podtemplates"}, {Resource: "replicationcontrollers"},
	{Resource: "resourcequotas"}, {Resource: "secrets"}, {Resource: "serviceaccounts"}, {Resource: "services"},
	{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"},
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"},
	{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicybindings"},
	{Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
	{Group: "apps", Resource: "controllerrevisions"}, {Group: "apps", Resource: "daemonsets"}, {Group: "apps", Resource: "deployments"},
	{Group: "apps", Resource: "replicasets"}, {Group: "apps", Resource: "statefulsets"},
	{Group: "autoscaling", Resource: "horizontalpodautoscalers"},
	{Group: "batch", Resource: "cronjobs"}, {Group: "batch", Resource: "jobs"},
	{Group: "discovery.k8s.io", Resource: "endpointslices"},
	{Group: "networking.k8s.io", Resource: "ingressclasses"}, {Group: "networking.k8s.io", Resource: "ingresses"},
	{Group: "networking.k8s.io", Resource: "networkpolicies"},
	{Group: "node.k8s.io", Resource: "runtimeclasses"},
	{Group: "policy", Resource: "poddisruptionbudgets"},
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}, {Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings"}, {Group: "rbac.authorization.k8s.io", Resource: "roles"},
	{Group: "scheduling.k8s.io", Resource: "priorityclasses"},
	{Group: "storage.k8s.io", Resource: "csidrivers"}, {Group: "storage.k8s.io", Resource: "storageclasses"},
}

// Rules are what ferry backup reads, cluster-wide: get and list on each type it reads, named one
// by one (a wildcard would match subresources too: nodes/proxy is exec on every node, pods/proxy
// and services/proxy reach into every workload). Secrets are among them: they move, and hold
// the database and bucket credentials the dumps and copies use. Discovery is open to every
// authenticated client already. Nothing is written cluster-wide.
func Rules(reads []schema.GroupResource) []rbacv1.PolicyRule {
	if len(reads) == 0 {
		reads = BuiltinReads
	}
	byGroup := map[string][]string{}
	for _, gr := range reads {
		if gr.Resource == "" || strings.ContainsAny(gr.Resource, "*/") || gr.Group == "*" {
			continue // never a wildcard nor a subresource
		}
		if !slices.Contains(byGroup[gr.Group], gr.Resource) {
			byGroup[gr.Group] = append(byGroup[gr.Group], gr.Resource)
		}
	}
	var rules []rbacv1.PolicyRule
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: slices.Sorted(slices.Values(byGroup[g])), Verbs: []string{"get", "list"}})
	}
	return rules
}

// DataRules are what ferry backup does in each namespace of the plan's claims, databases and
// buckets, and nowhere else: short-lived mover pods are created, watched and deleted; mover pods
// (ferry mover pack) and database pods (the dump) are exec'd into, bucket pods port-forwarded to
// (POSTs over SPDY and GETs over WebSocket, authorized as create and get); the Secrets holding a
// database's or bucket's credentials are read.
func DataRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "delete", "get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/portforward"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}
}

// Args are the job's command line after "ferry": a backup with in-cluster credentials (no
// --from, no kubeconfig), logs as JSON, named after the schedule.
func Args(o Options) []string {
	args := []string{"backup", "--storage", o.Storage, "--log-format", "json", "--progress", "never", "--schedule", o.Name, "--mover-image", o.Image}
	switch {
	case len(o.Config) > 0:
		args = append(args, "-f", ConfigDir+"/"+ConfigFile)
	case o.Preset != "":
		args = append(args, "--preset", o.Preset)
	}
	for _, r := range o.EncryptTo {
		args = append(args, "--encrypt-to", r)
	}
	if o.MoverDirect {
		args = append(args, "--mover-direct")
	}
	if o.VolumeFormat != "" {
		args = append(args, "--volume-format", o.VolumeFormat)
	}
	if o.Parallel > 0 {
		args = append(args, "--parallel", fmt.Sprint(o.Parallel))
	}
	return args
}

// Manifests are the objects of one schedule.
type Manifests struct {
	Namespace          *corev1.Namespace
	ServiceAccount     *corev1.ServiceAccount
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	// Roles and RoleBindings give DataRules in each data namespace, in the same order.
	Roles        []*rbacv1.Role
	RoleBindings []*rbacv1.RoleBinding
	ConfigMap    *corev1.ConfigMap // nil without a ferry.yaml
	CronJob      *batchv1.CronJob
}

// Build makes the manifests of a schedule; it checks the options first.
func Build(o Options) (*Manifests, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	labels := Labels(o.Name)
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
	}
	sa := ResourceName(o.Name)
	m := &Manifests{
		Namespace: &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}},
		ServiceAccount: &corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(sa, o.Namespace),
			AutomountServiceAccountToken: ptr.To(true)},
		ClusterRole: &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: meta(ClusterResourceName(o.Namespace, o.Name), ""), Rules: Rules(o.Reads)},
		ClusterRoleBinding: &rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(ClusterResourceName(o.Namespace, o.Name), ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: ClusterResourceName(o.Namespace, o.Name)},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: o.Namespace}}},
	}
	for _, ns := range slices.Compact(slices.Sorted(slices.Values(o.DataNamespaces))) {
		role := ClusterResourceName(o.Namespace, o.Name)
		m.Roles = append(m.Roles, &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: meta(role, ns), Rules: DataRules()})
		m.RoleBindings = append(m.RoleBindings, &rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: meta(role, ns),
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: o.Namespace}}})
	}
	if len(o.ServiceAccountAnnotations) > 0 {
		m.ServiceAccount.Annotations = o.ServiceAccountAnnotations
	}
	container := corev1.Container{
		Name: ContainerName, Image: o.Image, Command: []string{"ferry"}, Args: Args(o),
		// HOME is writable (an emptyDir) for anything that wants a cache; the root file system is not.
		Env: []corev1.EnvVar{{Name: "HOME", Value: "/tmp"}},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](UID), RunAsGroup: ptr.To[int64](UID),
			ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
	}
	if o.StorageSecret != "" {
		ref := func(env, key string) corev1.EnvVar {
			return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: o.StorageSecret}, Key: key}}}
		}
		container.Env = append(container.Env, ref("AWS_ACCESS_KEY_ID", AccessKeyKey), ref("AWS_SECRET_ACCESS_KEY", SecretKeyKey))
	}
	volumes := []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if len(o.Config) > 0 {
		m.ConfigMap = &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta(ResourceName(o.Name), o.Namespace),
			Data: map[string]string{ConfigFile: string(o.Config)}}
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: "config", MountPath: ConfigDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ResourceName(o.Name)}}}})
	}
	podMeta := metav1.ObjectMeta{Labels: labels}
	cronJob := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: meta(o.Name, o.Namespace),
		Spec: batchv1.CronJobSpec{
			Schedule: o.Cron,
			// Two backups of one cluster at once only slow each other down.
			ConcurrencyPolicy:          batchv1.ForbidConcurrent,
			StartingDeadlineSeconds:    ptr.To(int64(cmp.Or(o.StartingDeadline, DefaultStartingDeadline) / time.Second)),
			Suspend:                    ptr.To(o.Suspend),
			SuccessfulJobsHistoryLimit: ptr.To[int32](3),
			FailedJobsHistoryLimit:     ptr.To[int32](3),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: podMeta,
				Spec: batchv1.JobSpec{
					// A failed backup (exit 1) removes what it wrote, so another try is clean;
					// bad input (2) or skipped items (3, the backup is complete) would fail the same way again.
					BackoffLimit: ptr.To[int32](2),
					// A stuck run ends, so the next one may start (concurrencyPolicy Forbid).
					ActiveDeadlineSeconds: ptr.To(int64(cmp.Or(o.ActiveDeadline, DefaultActiveDeadline) / time.Second)),
					PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
						Action: batchv1.PodFailurePolicyActionFailJob,
						OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
							ContainerName: ptr.To(ContainerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{2, 3}},
					}}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: podMeta,
						Spec: corev1.PodSpec{
							ServiceAccountName: sa,
							RestartPolicy:      corev1.RestartPolicyNever,
							SecurityContext: &corev1.PodSecurityContext{
								RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](UID), RunAsGroup: ptr.To[int64](UID), FSGroup: ptr.To[int64](UID),
								SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
							},
							Containers: []corev1.Container{container},
							Volumes:    volumes,
						},
					},
				},
			},
		},
	}
	cronJob.Annotations = map[string]string{StorageAnnotation: o.Storage}
	m.CronJob = cronJob
	return m, nil
}

// Objects are the manifests in the order they are applied: the CronJob last, so that it never
// runs without its permissions.
func (m *Manifests) Objects() []runtime.Object {
	out := []runtime.Object{m.Namespace, m.ServiceAccount, m.ClusterRole, m.ClusterRoleBinding}
	for i := range m.Roles {
		out = append(out, m.Roles[i], m.RoleBindings[i])
	}
	if m.ConfigMap != nil {
		out = append(out, m.ConfigMap)
	}
	return append(out, m.CronJob)
}

// YAML is the manifests as one multi-document YAML stream, as kubectl apply -f reads it.
func (m *Manifests) YAML() ([]byte, error) {
	var buf bytes.Buffer
	for i, obj := range m.Objects() {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(stripEmpty(data))
	}
	return buf.Bytes(), nil
}

// stripEmpty drops the empty status and creationTimestamp the API types marshal.
func stripEmpty(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := strings.TrimSpace(string(line)); t == "status: {}" || t == "creationTimestamp: null" {
			continue
		}
		out = append(out, line)
	}
	return bytes.Join(out, []byte("\n"))
}
