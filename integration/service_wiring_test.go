package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ferrykube/ferry/integration/testbed"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const wiringNS = "wiring"

// wiringManifests are what a namespace holds to reach what runs outside the cluster and to let a
// tool outside call in, which no controller of the target makes from anything else:
//   - a Service without a selector and its Endpoints, written by hand (an external database);
//   - a Service without a selector and an EndpointSlice written by hand, as Kubernetes now
//     recommends (Endpoints are deprecated);
//   - a long-lived token for a CI system: a Secret of type service-account-token that names its
//     ServiceAccount, which the cluster's token controller fills.
//
// A Service with a selector and a pod beside them has endpoints the controllers make.
const wiringManifests = `apiVersion: v1
kind: Namespace
metadata: {name: ` + wiringNS + `}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ci, namespace: ` + wiringNS + `}
---
apiVersion: v1
kind: Secret
metadata:
  name: ci-token
  namespace: ` + wiringNS + `
  annotations: {kubernetes.io/service-account.name: ci}
type: kubernetes.io/service-account-token
---
apiVersion: v1
kind: Service
metadata: {name: external-db, namespace: ` + wiringNS + `}
spec:
  ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: external-db, namespace: ` + wiringNS + `}
subsets:
- addresses: [{ip: 192.0.2.10}, {ip: 192.0.2.11}]
  ports: [{name: pg, port: 5432}]
---
apiVersion: v1
kind: Service
metadata: {name: legacy-api, namespace: ` + wiringNS + `}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: legacy-api-1
  namespace: ` + wiringNS + `
  labels: {kubernetes.io/service-name: legacy-api, endpointslice.kubernetes.io/managed-by: staff}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [192.0.2.20]
  conditions: {ready: true}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ` + wiringNS + `}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: ` + wiringNS + `, labels: {app: web}}
spec:
  containers: [{name: web, image: nginx, ports: [{containerPort: 8080}]}]
`

// TestServiceWiringMoves: what wires a namespace to the world outside the cluster moves to green,
// as a user checks it there: the hand-written endpoints of Services without a selector are
// green's endpoints (kube-proxy's EndpointSlices included), and the CI system's token Secret is
// on green holding a token green's API server accepts as the ServiceAccount (blue's token is not
// one, and green's token controller mints its own). The endpoints the controllers make from a
// selector and pods are green's own, not blue's. Verify then passes.
func TestServiceWiringMoves(t *testing.T) {
	testbed.Require(t, tb)
	blue, blueKC := clients(t, "blue")
	green, greenKC := clients(t, "green")
	removeAfter(t, wiringNS, blueKC, greenKC)
	ctx := context.Background()
	kubectl(t, "blue", wiringManifests, "apply", "-f", "-")
	blueToken := filledToken(t, blueKC, wiringNS, "ci-token")
	if who := tokenUser(t, blue, blueToken); who != "system:serviceaccount:"+wiringNS+":ci" {
		t.Fatalf("blue takes its own token as %q", who)
	}
	waitUntil(t, "blue's endpoints of web", time.Minute, func(ctx context.Context) (bool, error) {
		return len(sliceAddresses(t, blueKC, "web")) > 0, nil
	})

	store := moveNamespace(t, wiringNS, "wiring")

	// What kube-proxy routes by: the EndpointSlices of each Service.
	for svc, want := range map[string][]string{"external-db": {"192.0.2.10", "192.0.2.11"}, "legacy-api": {"192.0.2.20"}} {
		var got []string
		if err := pollFor(time.Minute, func() bool { got = sliceAddresses(t, greenKC, svc); return slices.Equal(got, want) }); err != nil {
			t.Errorf("green's endpoints of Service %s: %v, want blue's %v", svc, got, want)
		}
	}
	ep, err := greenKC.CoreV1().Endpoints(wiringNS).Get(ctx, "external-db", metav1.GetOptions{})
	if err != nil {
		t.Errorf("green's Endpoints external-db: %v", err)
	} else if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 2 || ep.Subsets[0].Ports[0].Port != 5432 {
		t.Errorf("green's Endpoints external-db: %+v", ep.Subsets)
	}
	// web's endpoints are green's pod's, made by green's controller, none of blue's.
	bluePod, err := blueKC.CoreV1().Pods(wiringNS).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var greenPod *corev1.Pod
	waitUntil(t, "green's pod web running with an IP", time.Minute, func(ctx context.Context) (bool, error) {
		greenPod, err = greenKC.CoreV1().Pods(wiringNS).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && greenPod.Status.PodIP != "", nil
	})
	var webGot []string
	if err := pollFor(time.Minute, func() bool {
		webGot = sliceAddresses(t, greenKC, "web")
		return slices.Equal(webGot, []string{greenPod.Status.PodIP})
	}); err != nil {
		t.Errorf("green's endpoints of web: %v, want only green's pod %s (blue's pod is %s)", webGot, greenPod.Status.PodIP, bluePod.Status.PodIP)
	}

	// The CI system's token: on green, filled by green, and green's API server takes it.
	greenToken := filledToken(t, greenKC, wiringNS, "ci-token")
	if greenToken == blueToken {
		t.Errorf("green's ci-token holds blue's token, which green's API server does not take")
	}
	if who := tokenUser(t, green, greenToken); who != "system:serviceaccount:"+wiringNS+":ci" {
		t.Errorf("green takes ci-token's token as %q, want the ServiceAccount ci", who)
	}

	if code, out, errOut := runFerry(t, "--storage", store, "verify", "--to", "green", "--backup", "wiring"); code != 0 {
		t.Errorf("verify exited %d\n%s\n%s", code, out, errOut)
	}
}

// filledToken waits until the token controller fills a token Secret and returns its token.
func filledToken(t *testing.T, kc kubernetes.Interface, namespace, name string) string {
	t.Helper()
	var token string
	waitUntil(t, "the token controller to fill "+namespace+"/"+name, time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kc.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		token = string(s.Data[corev1.ServiceAccountTokenKey])
		return token != "", nil
	})
	return token
}

// tokenUser is who cluster c's API server takes a bearer token for, as kubectl auth whoami asks.
func tokenUser(t *testing.T, c *testbed.Cluster, token string) string {
	t.Helper()
	cfg, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = token
	kc, err := kubernetes.NewForConfig(anon)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kc.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "refused: " + err.Error()
	}
	return review.Status.UserInfo.Username
}

// sliceAddresses are the ready addresses of a Service's EndpointSlices, sorted.
func sliceAddresses(t *testing.T, kc kubernetes.Interface, service string) []string {
	t.Helper()
	list, err := kc.DiscoveryV1().EndpointSlices(wiringNS).List(context.Background(), metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				out = append(out, e.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return out
}

// pollFor polls cond every 200 ms until it holds or timeout passes.
func pollFor(timeout time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
}
