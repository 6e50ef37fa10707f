package kube

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestWaitServiceAccount(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, "default")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "serviceaccounts"}, "default", errors.New("no RBAC"))
	for _, tc := range []struct {
		name    string
		answers []error // what each Get says; the last one repeats
		wantErr string
	}{
		{name: "there at once", answers: []error{nil}},
		{name: "made a moment later", answers: []error{notFound, notFound, nil}},
		{name: "not readable: not waited for", answers: []error{forbidden}},
		{name: "never made", answers: []error{notFound}, wantErr: "service account team/default, which pods in the namespace run as, does not exist after 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			get := func(context.Context) error {
				err := tc.answers[min(calls, len(tc.answers)-1)]
				calls++
				return err
			}
			err := WaitServiceAccount(context.Background(), "team", "default", time.Second, get)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
}
