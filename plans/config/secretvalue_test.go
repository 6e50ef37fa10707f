package config

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
)

const canary = "canary-7f3a9c"

func webhookYAML(headers string) string {
	return "traffic:\n  type: webhook\n  webhook:\n    url: https://lb.example/split\n    headers:\n" + headers
}

// Secret settings of ferry.yaml are references; a value in place, or a reference that is wrong,
// is bad input naming the field, and the message never repeats a value.
func TestSecretSettingsAreReferences(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"value in place", webhookYAML("      Authorization: Bearer " + canary + "\n"), "traffic.webhook.headers.Authorization: a value in place would be stored in plaintext"},
		{"no valueFrom", webhookYAML("      Authorization: {}\n"), "traffic.webhook.headers.Authorization: missing"},
		{"empty valueFrom", webhookYAML("      Authorization: {valueFrom: {}}\n"), "traffic.webhook.headers.Authorization.valueFrom: needs env or secretKeyRef"},
		{"both sources", webhookYAML("      Authorization: {valueFrom: {env: T, secretKeyRef: {namespace: ops, name: lb, key: token}}}\n"), "traffic.webhook.headers.Authorization.valueFrom: has both"},
		{"bad variable", webhookYAML("      Authorization: {valueFrom: {env: 1-TOKEN}}\n"), `traffic.webhook.headers.Authorization.valueFrom.env: "1-TOKEN"`},
		{"bad namespace", webhookYAML("      Authorization: {valueFrom: {secretKeyRef: {namespace: Ops, name: lb, key: token}}}\n"), "traffic.webhook.headers.Authorization.valueFrom.secretKeyRef.namespace"},
		{"no key", webhookYAML("      Authorization: {valueFrom: {secretKeyRef: {namespace: ops, name: lb}}}\n"), "traffic.webhook.headers.Authorization.valueFrom.secretKeyRef.key"},
		{"unknown source", webhookYAML("      Authorization: {valueFrom: {file: /etc/token}}\n"), "field file not found"},
		{"unknown field", webhookYAML("      Authorization: {value: x, valueFrom: {env: T}}\n"), "field value not found"},
		{"bad header name", webhookYAML("      \"Bad Header\": {valueFrom: {env: T}}\n"), `traffic.webhook.headers.Bad Header: "Bad Header" is not an HTTP header's name`},
		{"password in the webhook's URL", "traffic: {type: webhook, webhook: {url: \"https://ops:" + canary + "@lb.example/split\"}}\n", "traffic.webhook.url: holds a password"},
		{"password in a gate's URL", "rollout: {gates: [{name: g, type: http, http: {url: \"https://ops:" + canary + "@green.example/\"}}]}\n", "rollout.gates[0].http.url: holds a password"},
		{"token in the webhook's query", "traffic: {type: webhook, webhook: {url: \"https://lb.example/split?access_token=" + canary + "\"}}\n", "traffic.webhook.url: holds query parameter access_token"},
		{"signature in a gate's query", "rollout: {gates: [{name: g, type: http, http: {url: \"https://green.example/health?X-Amz-Signature=" + canary + "\"}}]}\n", "rollout.gates[0].http.url: holds query parameter X-Amz-Signature"},
		{"token flag of an exec switcher", "traffic: {type: exec, exec: {command: [set-weights, --token, " + canary + "]}}\n", "traffic.exec.command[1]: holds argument --token with a value"},
		{"bearer token in an exec script", "traffic: {type: exec, exec: {command: [sh, -c, \"curl -H 'Authorization: Bearer " + canary + "' https://lb/split\"]}}\n", "traffic.exec.command[2]: holds"},
		{"password in a URL of an exec script", "traffic: {type: exec, exec: {command: [sh, -c, \"curl https://ops:" + canary + "@lb/split\"]}}\n", "traffic.exec.command[2]: holds a password in a URL"},
		// yaml's own type errors quote a scalar (10 characters whole, or the first 7).
		{"a scalar for the headers", "traffic: {type: webhook, webhook: {url: \"https://lb.example/split\", headers: " + canary[:10] + "}}\n", "line 1: cannot unmarshal !!str (value not shown) into map"},
		{"password in Prometheus' address", "rollout: {gates: [{name: g, type: prometheus, prometheus: {address: \"http://u:" + canary + "@prom:9090\", query: up, min: 1}}]}\n", "rollout.gates[0].prometheus.address: holds a password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("ferry.yaml", []byte(tc.yaml))
			if err == nil || !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseConfig = %v; want bad input saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("the error repeats a secret value: %v", err)
			}
		})
	}
}

// The configuration a run's journal stores holds the references of secret settings, never their
// values, even once they were resolved; and it reads back as the same references. (A plan, and
// so a backup's manifest, holds no traffic settings at all.)
func TestStoredConfigHoldsNoSecretValue(t *testing.T) {
	ctx := context.Background()
	cfg, err := ParseConfig("ferry.yaml", []byte(webhookYAML(
		"      Authorization: {valueFrom: {env: LB_TOKEN}}\n"+
			"      X-Api-Key: {valueFrom: {secretKeyRef: {namespace: ops, name: lb-credentials, key: api-key}}}\n")))
	if err != nil {
		t.Fatal(err)
	}
	cluster := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{{Version: "v1", Resource: "secrets"}: "SecretList"},
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "lb-credentials", "namespace": "ops"},
			"data":     map[string]any{"api-key": base64.StdEncoding.EncodeToString([]byte(canary + "-key"))}}})
	r := Resolver{LookupEnv: func(k string) (string, bool) {
		return map[string]string{"LB_TOKEN": "Bearer " + canary}[k], k == "LB_TOKEN"
	},
		Secret: ClusterSecrets(cluster), Cluster: "context blue"}
	headers, err := r.ResolveAll(ctx, "traffic.webhook.headers", cfg.Traffic.Webhook.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if headers["Authorization"] != "Bearer "+canary || headers["X-Api-Key"] != canary+"-key" {
		t.Fatalf("resolved %d headers, not to their values", len(headers))
	}

	stored, err := json.Marshal(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored), canary) {
		t.Errorf("the stored configuration holds a secret value: %s", stored)
	}
	for _, ref := range []string{`"env":"LB_TOKEN"`, `"name":"lb-credentials"`, `"key":"api-key"`} {
		if !strings.Contains(string(stored), ref) {
			t.Errorf("the stored configuration lacks the reference %s: %s", ref, stored)
		}
	}
	var back Config
	if err := json.Unmarshal(stored, &back); err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(); err != nil {
		t.Errorf("the stored configuration read back: %v", err)
	}
	if again, _ := json.Marshal(&back); string(again) != string(stored) {
		t.Errorf("the stored configuration changed in a round trip:\n%s\n%s", stored, again)
	}
}

// A journal of an older ferry holds header values in place: they read, are never written again,
// and are refused when used.
func TestOlderConfigWithAHeaderValue(t *testing.T) {
	var p struct {
		Config Config `json:"config"`
	}
	old := `{"config": {"traffic": {"type": "webhook", "webhook": {"url": "https://lb.example/", "headers": {"Authorization": "Bearer ` + canary + `"}}}}}`
	if err := json.Unmarshal([]byte(old), &p); err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(&p); strings.Contains(string(again), canary) {
		t.Errorf("the value is written again: %s", again)
	}
	_, err := Resolver{}.Resolve(context.Background(), "traffic.webhook.headers.Authorization", p.Config.Traffic.Webhook.Headers["Authorization"])
	if !badinput.Is(err) || !strings.Contains(err.Error(), "a value in place") || strings.Contains(err.Error(), canary) {
		t.Errorf("resolving it: %v; want bad input saying it is in place, without the value", err)
	}
}

// Resolve reads environment variables and Secrets; what is missing is bad input naming the field
// and the reference.
func TestResolveErrors(t *testing.T) {
	ctx := context.Background()
	cluster := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{{Version: "v1", Resource: "secrets"}: "SecretList"},
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": "lb", "namespace": "ops"}, "data": map[string]any{"token": base64.StdEncoding.EncodeToString([]byte(canary))}}})
	r := Resolver{LookupEnv: func(k string) (string, bool) {
		v, ok := map[string]string{"SET": canary, "EMPTY": ""}[k]
		return v, ok
	}, Secret: ClusterSecrets(cluster), Cluster: "context blue"}
	ref := func(ns, name, key string) SecretValue {
		return SecretValue{ValueFrom: &ValueFrom{SecretKeyRef: &SecretKeyRef{Namespace: ns, Name: name, Key: key}}}
	}
	for _, tc := range []struct {
		name  string
		v     SecretValue
		value string // wanted, or else the error's words
		want  string
	}{
		{"env", FromEnv("SET"), canary, ""},
		{"secret", ref("ops", "lb", "token"), canary, ""},
		{"unset env", FromEnv("UNSET"), "", "f: environment variable UNSET is not set"},
		{"empty env", FromEnv("EMPTY"), "", "f: environment variable EMPTY is not set or empty"},
		{"no Secret", ref("ops", "gone", "token"), "", "f: key token of Secret ops/gone on context blue"},
		{"no key", ref("ops", "lb", "other"), "", `Secret ops/lb has no key "other"`},
		{"in place", Literal(), "", "f: a value in place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Resolve(ctx, "f", tc.v)
			if tc.want == "" {
				if err != nil || got != tc.value {
					t.Fatalf("Resolve = %d bytes, %v", len(got), err)
				}
				return
			}
			if !badinput.Is(err) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), canary) {
				t.Fatalf("Resolve: %v; want bad input saying %q without a value", err, tc.want)
			}
		})
	}
}
