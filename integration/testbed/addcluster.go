package testbed

import (
	"context"
	"fmt"
	"path/filepath"
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
		return nil, fmt.Errorf("testbed: add cluster %s: %w", name, err)
	}
	watchCtx, cancel := context.WithCancel(context.Background())
	previous := tb.stopWatchers
	tb.stopWatchers = func() {
		cancel()
		if previous != nil {
			previous()
		}
	}
	if err := c.mapMovers(watchCtx); err != nil {
		return nil, err
	}
	if err := c.provision(watchCtx, filepath.Join(tb.Dir, "data", "provisioned-"+name)); err != nil {
		return nil, err
	}
	return c, nil
}
