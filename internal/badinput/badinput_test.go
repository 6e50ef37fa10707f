package badinput

import (
	"errors"
	"fmt"
	"testing"
)

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("boom"), false},
		{"marked", Errorf("bad flag %q", "--x"), true},
		{"wrapped marked", fmt.Errorf("open: %w", Wrap(errors.New("bad url"))), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Is(tc.err); got != tc.want {
				t.Fatalf("Is(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	if Wrap(nil) != nil {
		t.Fatal("Wrap(nil) must stay nil")
	}
}
