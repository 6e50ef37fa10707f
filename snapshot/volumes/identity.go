package volumes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ferrykube/ferry/internal/kube"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Mover pods run in the tenants' namespaces, where anyone who may edit pods can change a running
// pod's image, or delete it and make another of the same name: ferry would then stream a claim's
// data, and hand storage access, to a program it did not choose. So ferry records each mover as
// it first sees it running, reads it again before every exec, and refuses a pod that is no longer
// the one it made. A refused pod is left in place for the operator to inspect.

// moverIdentity is what makes a mover pod the one ferry made.
type moverIdentity struct {
	namespace, name string
	uid             types.UID
	// labels and annotations are ferry's own (the pod may gain others).
	labels, annotations map[string]string
	// containers and initContainers are as the API server created them (admission may pin an
	// image or inject a sidecar): after creation none of them may change.
	containers, initContainers []containerIdentity
	// running is each container as ferry first saw the pod running, by name.
	running map[string]containerRun
	// refused is set once a check failed: the pod is not deleted then.
	refused atomic.Bool
}

type containerIdentity struct {
	name, image   string
	command, args []string
}

type containerRun struct {
	imageID  string // "" where the runtime reports none
	restarts int32
}

// recordMover records the identity of a mover pod: spec is what ferry sent, created what the API
// server made of it, running the pod as ferry first saw it running.
func recordMover(spec, created, running *corev1.Pod) *moverIdentity {
	id := &moverIdentity{
		namespace: created.Namespace, name: created.Name, uid: created.UID,
		labels: maps.Clone(spec.Labels), annotations: maps.Clone(spec.Annotations),
		containers:     containerIdentities(created.Spec.Containers, spec.Spec.Containers),
		initContainers: containerIdentities(created.Spec.InitContainers, spec.Spec.InitContainers),
		running:        map[string]containerRun{},
	}
	for _, s := range slices.Concat(running.Status.InitContainerStatuses, running.Status.ContainerStatuses) {
		id.running[s.Name] = containerRun{imageID: s.ImageID, restarts: s.RestartCount}
	}
	return id
}

// containerIdentities lists the containers as the API server created them: admission may have
// pinned an image to its digest or added a sidecar, and both are part of the pod ferry made. Its
// own containers come first, in the order ferry asked for them.
func containerIdentities(created, asked []corev1.Container) []containerIdentity {
	var out []containerIdentity
	for _, c := range created {
		if slices.ContainsFunc(asked, func(a corev1.Container) bool { return a.Name == c.Name }) {
			out = append(out, containerIdentity{name: c.Name, image: c.Image, command: c.Command, args: c.Args})
		}
	}
	for _, c := range created {
		if !slices.ContainsFunc(asked, func(a corev1.Container) bool { return a.Name == c.Name }) {
			out = append(out, containerIdentity{name: c.Name, image: c.Image, command: c.Command, args: c.Args})
		}
	}
	return out
}

// check reads the pod again and returns an errMoverChanged naming every change that makes it
// another pod than the one ferry made.
func (m *moverIdentity) check(ctx context.Context, client kubernetes.Interface) error {
	p, err := client.CoreV1().Pods(m.namespace).Get(ctx, m.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("mover pod %s/%s: read it before exec: %w", m.namespace, m.name, err)
	}
	if changes := m.changes(p); len(changes) > 0 {
		m.refused.Store(true)
		return errMoverChanged{m.namespace, m.name, changes}
	}
	return nil
}

// changes compares the pod with the identity. Values are named where they are ferry's or the
// pod's own (images, labels), never annotations' or commands'.
func (m *moverIdentity) changes(p *corev1.Pod) []string {
	if p.UID != m.uid {
		return []string{fmt.Sprintf("it was deleted and made again (UID %s, ferry's was %s)", p.UID, m.uid)}
	}
	var out []string
	for _, k := range sortedKeys(m.labels) {
		switch v, ok := p.Labels[k]; {
		case !ok:
			out = append(out, "label "+k+" was removed")
		case v != m.labels[k]:
			out = append(out, fmt.Sprintf("label %s is now %q, ferry set %q", k, v, m.labels[k]))
		}
	}
	for _, k := range sortedKeys(m.annotations) {
		switch v, ok := p.Annotations[k]; {
		case !ok:
			out = append(out, "annotation "+k+" was removed")
		case v != m.annotations[k]:
			out = append(out, "annotation "+k+" was changed")
		}
	}
	out = append(out, containerChanges("container", m.containers, p.Spec.Containers)...)
	out = append(out, containerChanges("init container", m.initContainers, p.Spec.InitContainers)...)
	for _, e := range p.Spec.EphemeralContainers {
		out = append(out, "ephemeral container "+e.Name+" was added")
	}
	now := map[string]corev1.ContainerStatus{}
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		now[s.Name] = s
	}
	for _, name := range sortedKeys(m.running) {
		was, s := m.running[name], now[name]
		switch {
		case s.Name == "":
			out = append(out, "container "+name+" no longer reports its status")
		case s.RestartCount != was.restarts:
			out = append(out, fmt.Sprintf("container %s restarted (restart count %d, ferry saw %d; its image may have been swapped)", name, s.RestartCount, was.restarts))
		case was.imageID != "" && s.ImageID != "" && s.ImageID != was.imageID:
			out = append(out, fmt.Sprintf("container %s runs image ID %q, ferry saw %q", name, s.ImageID, was.imageID))
		}
	}
	return out
}

func containerChanges(kind string, want []containerIdentity, got []corev1.Container) []string {
	var out []string
	for _, w := range want {
		i := slices.IndexFunc(got, func(c corev1.Container) bool { return c.Name == w.name })
		if i < 0 {
			out = append(out, kind+" "+w.name+" was removed")
			continue
		}
		g := got[i]
		if g.Image != w.image {
			out = append(out, fmt.Sprintf("%s %s image is now %q, ferry started it with %q", kind, w.name, g.Image, w.image))
		}
		if !slices.Equal(g.Command, w.command) || !slices.Equal(g.Args, w.args) {
			out = append(out, kind+" "+w.name+" runs another command")
		}
	}
	for _, g := range got {
		if !slices.ContainsFunc(want, func(w containerIdentity) bool { return w.name == g.Name }) {
			out = append(out, kind+" "+g.Name+" was added")
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// errMoverChanged is a refused exec: the pod is no longer the one ferry made.
type errMoverChanged struct {
	namespace, pod string
	changes        []string
}

func (e errMoverChanged) Error() string {
	return fmt.Sprintf("mover pod %s/%s: %s; refusing to exec into it (the pod is left in place for inspection)",
		e.namespace, e.pod, strings.Join(e.changes, "; "))
}

// moverSet holds the identity of every mover pod a run started and has not stopped, by
// namespace/name.
type moverSet struct {
	mu  sync.Mutex
	ids map[string]*moverIdentity
}

func newMoverSet() *moverSet { return &moverSet{ids: map[string]*moverIdentity{}} }

func (s *moverSet) add(id *moverIdentity) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[id.namespace+"/"+id.name] = id
}

// get returns the pod's identity, nil for a pod the run did not start (or a nil set).
func (s *moverSet) get(namespace, pod string) *moverIdentity {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[namespace+"/"+pod]
}

// remove forgets the pod and returns its identity, if it had one.
func (s *moverSet) remove(namespace, pod string) *moverIdentity {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.ids[namespace+"/"+pod]
	delete(s.ids, namespace+"/"+pod)
	return id
}

// exec runs a command in a mover pod this run started, once the pod checks out as the one it
// made. (A change between the check and the exec goes unseen; the check makes that window
// small, it cannot close it.)
func (c Contents) exec(ctx context.Context, req kube.ExecRequest) error {
	id := c.movers.get(req.Namespace, req.Pod)
	if id == nil {
		return fmt.Errorf("mover pod %s/%s: not a pod this run started; refusing to exec into it", req.Namespace, req.Pod)
	}
	if err := id.check(ctx, c.Client); err != nil {
		return err
	}
	return kube.Exec(ctx, c.Config, c.Client, req)
}

// isRefused reports whether err is a refused exec.
func isRefused(err error) bool {
	var changed errMoverChanged
	return errors.As(err, &changed)
}

// execOutputMemory is the most of a mover's output that ferry holds in memory while it reads it
// slower than it comes; the rest waits in a temporary file. A mover staging or applying a claim
// of a million files prints about 200 MB of lines at once.
const execOutputMemory = 16 << 20

// execReading runs a command in a mover with its stdout handed to read as it prints it; read
// reads to the end or fails, which stops the command. It returns read's error and the
// command's. The output is taken as it comes (see kube.ReadOutput).
func (c Contents) execReading(ctx context.Context, req kube.ExecRequest, read func(io.Reader) error) (readErr, execErr error) {
	return kube.ReadOutput(execOutputMemory, func(stdout io.Writer) error {
		req.Stdout = stdout
		return c.exec(ctx, req)
	}, read)
}
