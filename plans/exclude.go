package plans

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// excludedResources never move: they describe the cluster itself, are rebuilt by it, or are events.
var excludedResources = map[string]string{
	"nodes":                                          "nodes belong to the cluster they run in",
	"events":                                         "events are a record of the source cluster's past",
	"events.events.k8s.io":                           "events are a record of the source cluster's past",
	"leases.coordination.k8s.io":                     "leases are held by the source cluster's running processes",
	"endpoints":                                      "endpoints are rebuilt from Services and Pods by the target's controllers",
	"endpointslices.discovery.k8s.io":                "endpoint slices are rebuilt from Services and Pods by the target's controllers",
	"csinodes.storage.k8s.io":                        "CSI node records belong to the source cluster's nodes",
	"csistoragecapacities.storage.k8s.io":            "storage capacity is published by the target's CSI drivers",
	"volumeattachments.storage.k8s.io":               "volume attachments belong to the source cluster's nodes",
	"certificatesigningrequests.certificates.k8s.io": "certificate requests are bound to the source cluster's signers",
	"ipaddresses.networking.k8s.io":                  "service IP allocations are made anew by the target",
	"servicecidrs.networking.k8s.io":                 "service CIDRs are the target cluster's own configuration",
	"apiservices.apiregistration.k8s.io":             "API services are registered by the target's API server and aggregated servers",
	"componentstatuses":                              "component statuses describe the source cluster's control plane",
	"bindings":                                       "bindings are an action, not stored objects",
}

// excludedType says why a whole resource type never moves, or "". Types that belong to one
// installation's own tooling (a simulator's, an agent's) are for its ferry.yaml to exclude.
func excludedType(gr string) string {
	return excludedResources[gr]
}

// systemNamespaces exist on every cluster; their Namespace objects do not move (their contents do).
var systemNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}

// exclusionReason says why one object does not move, or "" when it moves. gr is the group-resource
// ("configmaps", "jobs.batch").
func exclusionReason(gr string, obj *unstructured.Unstructured) string {
	ann := obj.GetAnnotations()
	name, ns := obj.GetName(), obj.GetNamespace()
	switch gr {
	case "namespaces":
		if systemNamespaces[name] {
			return "every cluster has this namespace"
		}
	case "configmaps":
		if name == "kube-root-ca.crt" {
			return "published into every namespace by the target's root-CA publisher"
		}
		if ns == "kube-system" && (name == "extension-apiserver-authentication" || strings.HasPrefix(name, "kube-apiserver-")) {
			return "published by the source cluster's API server"
		}
	case "secrets":
		if t, _, _ := unstructured.NestedString(obj.Object, "type"); t == "kubernetes.io/service-account-token" {
			return "service account tokens are minted for the cluster that signs them"
		}
		if t, _, _ := unstructured.NestedString(obj.Object, "type"); t == "bootstrap.kubernetes.io/token" {
			return "bootstrap tokens belong to the source cluster"
		}
	case "serviceaccounts":
		if name == "default" {
			return "the target's controller manager creates it in every namespace"
		}
	case "clustertrustbundles.certificates.k8s.io":
		if signer, _, _ := unstructured.NestedString(obj.Object, "spec", "signerName"); signer == "kubernetes.io/kube-apiserver-serving" {
			return "published by the source cluster's API server for its own serving certificates"
		}
	case "services":
		if ns == "default" && name == "kubernetes" {
			return "the target's API server publishes its own"
		}
	case "pods":
		if _, mirror := ann["kubernetes.io/config.mirror"]; mirror {
			return "mirror pod of a static pod on a source node"
		}
		if phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); phase == "Succeeded" || phase == "Failed" {
			return "finished pod (" + phase + ")"
		}
	case "jobs.batch":
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if (cm["type"] == "Complete" || cm["type"] == "Failed") && cm["status"] == "True" {
				return "finished job (" + cm["type"].(string) + ")"
			}
		}
	case "clusterroles.rbac.authorization.k8s.io", "clusterrolebindings.rbac.authorization.k8s.io",
		"roles.rbac.authorization.k8s.io", "rolebindings.rbac.authorization.k8s.io":
		if ann["rbac.authorization.kubernetes.io/autoupdate"] == "true" {
			return "bootstrap RBAC the target's API server keeps up to date"
		}
	case "flowschemas.flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io":
		if ann["apf.kubernetes.io/autoupdate-spec"] == "true" {
			return "API priority and fairness defaults the target's API server maintains"
		}
	case "priorityclasses.scheduling.k8s.io":
		if name == "system-cluster-critical" || name == "system-node-critical" {
			return "built into every cluster"
		}
	}
	return ""
}
