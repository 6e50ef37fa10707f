package kube

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestCreateCounted: a create refused for a quota its controller has not counted yet is made
// again until it passes; one refused for any other reason (the quota is full) is not.
func TestCreateCounted(t *testing.T) {
	services := schema.GroupResource{Resource: "services"}
	uncounted := apierrors.NewForbidden(services, "web", errors.New("status unknown for quota: kf-resource-quota, resources: services"))
	full := apierrors.NewForbidden(services, "web", errors.New("exceeded quota: kf-resource-quota, requested: services=1, used: services=1, limited: services=1"))
	for _, tc := range []struct {
		name    string
		answers []error
		calls   int
		want    error
	}{
		{"made at once", []error{nil}, 1, nil},
		{"counted after two refusals", []error{uncounted, uncounted, nil}, 3, nil},
		{"quota full", []error{full, nil}, 1, full},
		{"another refusal after one uncounted", []error{uncounted, full, nil}, 2, full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := CreateCounted(context.Background(), func() error {
				calls++
				return tc.answers[calls-1]
			})
			if calls != tc.calls || !errors.Is(err, tc.want) {
				t.Errorf("CreateCounted called create %d times and returned %v; want %d and %v", calls, err, tc.calls, tc.want)
			}
		})
	}
	if QuotaUncounted(full) || !QuotaUncounted(uncounted) || QuotaUncounted(nil) {
		t.Error("QuotaUncounted tells a quota not counted yet from a full one wrongly")
	}
}
