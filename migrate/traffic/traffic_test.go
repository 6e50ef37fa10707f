package traffic

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ferrykube/ferry/internal/badinput"
	"github.com/ferrykube/ferry/plans/config"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		blue, green int
		want        Split
		ok          bool
	}{{256, 0, Green(0), true}, {230, 26, Green(10), true}, {128, 128, Green(50), true}, {1, 2, Green(67), true}, {0, 0, Split{}, false}} {
		if got, ok := splitOf(tc.blue, tc.green); got != tc.want || ok != tc.ok {
			t.Errorf("splitOf(%d, %d) = %v, %v; want %v, %v", tc.blue, tc.green, got, ok, tc.want, tc.ok)
		}
	}
	if err := (Split{Blue: 40, Green: 40}).Valid(); err == nil || !badinput.Is(err) {
		t.Errorf("40/40 is valid: %v", err)
	}
	if err := Green(10).Valid(); err != nil {
		t.Error(err)
	}
	// The state travels through the journal as JSON and comes back byte for byte.
	st := State(`{"a":1}`)
	data, _ := json.Marshal(struct{ S State }{st})
	var back struct{ S State }
	if err := json.Unmarshal(data, &back); err != nil || string(back.S) != string(st) {
		t.Errorf("state round trip: %s → %s, %v", data, back.S, err)
	}
}

func TestNewRefusesMissingBlocks(t *testing.T) {
	for _, cfg := range []config.Traffic{{Type: "nginx"}, {Type: config.TrafficHAProxy}, {Type: config.TrafficExec, Exec: &config.ExecTraffic{}}} {
		if _, err := New(context.Background(), cfg, Options{}); err == nil || !badinput.Is(err) {
			t.Errorf("New(%+v) = %v, want bad input", cfg, err)
		}
	}
	if _, err := New(context.Background(), config.Traffic{Type: config.TrafficGatewayAPI, GatewayAPI: &config.GatewayAPITraffic{}}, Options{}); err == nil {
		t.Error("gateway-api without a kubeconfig")
	}
}
