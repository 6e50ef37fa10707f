// Package badinput marks errors caused by what the user gave ferry (flags, files, URLs), so that the
// command line can tell them apart from failures and exit with code 2.
package badinput

import (
	"errors"
	"fmt"
)

// Error is an error caused by bad user input. Its message names what is wrong.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf formats an error as fmt.Errorf does and marks it as bad input.
func Errorf(format string, args ...any) error {
	return &Error{Err: fmt.Errorf(format, args...)}
}

// Wrap marks err as bad input; nil stays nil.
func Wrap(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err}
}

// Is reports whether err or any error it wraps is bad input.
func Is(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
