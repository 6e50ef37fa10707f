package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// A port-forward the API server refuses says why, not that its context ended.
func TestPortForwardSaysWhyItFailed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"p\" is forbidden: no portforward for you","reason":"Forbidden","code":403}`))
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for range 5 { // the failure raced the forwarder's own end
		_, _, err := PortForward(ctx, cfg, client, "ns", "p", 9000)
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Fatalf("PortForward = %v, want the API server's refusal", err)
		}
	}
}
