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

func TestFlag(t *testing.T) {
	flags := map[string]string{"identity file": "--identity"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a value", Value("identity file", "key.txt", "no such file"), "--identity key.txt: no such file"},
		{"wrapped", fmt.Errorf("open backup b1: %w", Value("identity file", "key.txt", "no such file")), "open backup b1: --identity key.txt: no such file"},
		{"another value", Value("recipient", `"x"`, "not a recipient"), `recipient "x": not a recipient`},
		{"no value", errors.New("boom"), "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Flag(tc.err, flags)
			if got.Error() != tc.want {
				t.Fatalf("Flag(%q) = %q, want %q", tc.err, got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Fatalf("Flag(%q) does not wrap it", tc.err)
			}
			var ve *ValueError
			if Is(got) != errors.As(tc.err, &ve) {
				t.Fatalf("Flag(%q): bad input %v", tc.err, Is(got))
			}
		})
	}
}
