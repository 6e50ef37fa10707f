package main

import (
	"fmt"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/internal/kube"
	"github.com/ferrykube/ferry/plans"
	"github.com/ferrykube/ferry/snapshot/kinds"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// restConfig returns the configuration for a kubeconfig context: the one named, else what the
// kubectl-style flags (--kubeconfig, --context, --server, ...) select. Client-side throttling is
// off: ferry's concurrency is bounded by its own limits, and the server's 429s are retried.
func (o *globalOptions) restConfig(contextName string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if contextName == "" {
		cfg, err = o.kube.ToRESTConfig()
	} else {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if o.kube.KubeConfig != nil && *o.kube.KubeConfig != "" {
			rules.ExplicitPath = *o.kube.KubeConfig
		}
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: contextName}).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig context %q: %w", contextName, err)
	}
	// No client-side rate limit at all (a negative QPS): the server's priority and fairness answers
	// 429 when it must, and client-go waits out its Retry-After.
	cfg.QPS, cfg.Burst = -1, 0
	// Deprecation notices for APIs ferry only counts (v1 Endpoints) would interleave with reports.
	cfg.WarningHandler = rest.NoWarnings{}
	// A refusal as invalid quotes the object's field, which may hold a secret, into ferry's reports.
	cfg.Wrap(kube.WithoutInvalidValues)
	return cfg, nil
}

// cluster builds the clients of a context that backups, restores and migrations use.
func (o *globalOptions) cluster(contextName string) (kinds.Cluster, error) {
	cfg, err := o.restConfig(contextName)
	if err != nil {
		return kinds.Cluster{}, badinput.Wrap(err)
	}
	return kinds.NewCluster(cfg)
}

// planClients builds the clients planning needs for a context.
func (o *globalOptions) planClients(contextName string) (plans.Clients, error) {
	cfg, err := o.restConfig(contextName)
	if err != nil {
		return plans.Clients{}, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return plans.Clients{}, err
	}
	dyn, err := kube.NewDynamic(cfg)
	if err != nil {
		return plans.Clients{}, err
	}
	return plans.Clients{Discovery: dc, Dynamic: dyn}, nil
}
