// Package badinput marks errors caused by what the user gave ferry (flags, files, URLs), so that the
// command line can tell them apart from failures and exit with code 2.
package badinput

import (
	"errors"
	"fmt"
	"strings"
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

// ValueError is bad input about one value a caller gave a library: Name is what the library calls
// it ("namespace map", "recipient"), Value the value as given, quoted or not (empty when the
// reason says it; never a secret). A command line that took the value from a flag names the flag
// instead (Flag), so that only the command line speaks of flags.
type ValueError struct{ Name, Value, Reason string }

func (e *ValueError) Error() string {
	s := e.Name
	if e.Value != "" {
		s += " " + e.Value
	}
	return s + ": " + e.Reason
}

// Value returns bad input about the value named name.
func Value(name, value, format string, args ...any) error {
	return &Error{Err: &ValueError{Name: name, Value: value, Reason: fmt.Sprintf(format, args...)}}
}

// Flag names flags instead of the values they gave: when err holds a ValueError whose name is a
// key of flags, the error reads as that error with the flag's name in place of the value's, and
// still wraps err. Other errors come back as they are.
func Flag(err error, flags map[string]string) error {
	var ve *ValueError
	if !errors.As(err, &ve) {
		return err
	}
	flag, ok := flags[ve.Name]
	if !ok {
		return err
	}
	named := &ValueError{Name: flag, Value: ve.Value, Reason: ve.Reason}
	return &Error{Err: &renamed{msg: strings.Replace(err.Error(), ve.Error(), named.Error(), 1), err: err}}
}

// renamed is an error read differently, wrapping what it was.
type renamed struct {
	msg string
	err error
}

func (e *renamed) Error() string { return e.msg }
func (e *renamed) Unwrap() error { return e.err }
