package kube

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WithoutInvalidValues wraps a transport to the API server so that its answers refusing an object
// as invalid (422) do not quote what the object holds. The API server names the field and why,
// and prints the value it refused: a whole pod template (its environment's values among it) when
// the template may not change, a custom resource's password that fails its schema's pattern.
// Those answers become errors that reach reports and logs, where a secret must never appear; a
// value that is a string, an object or a list is replaced there by ValueNotShown (a number,
// true, false or null stays). An answer not in JSON is not shown at all.
func WithoutInvalidValues(rt http.RoundTripper) http.RoundTripper {
	return invalidValues{rt}
}

// ValueNotShown stands for a value the API server quoted (WithoutInvalidValues).
const ValueNotShown = "(a value not shown)"

// maxStatus bounds the answer read to take the values out of; a longer one is not shown at all.
const maxStatus = 64 << 20

type invalidValues struct{ http.RoundTripper }

func (t invalidValues) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnprocessableEntity {
		return resp, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatus+1))
	resp.Body.Close()
	unshown := func(why string) metav1.Status {
		return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: "the API server refused the object as invalid, in an answer " + why}
	}
	var status metav1.Status
	switch {
	case err != nil:
		status = unshown("that broke off: " + err.Error())
	case len(body) > maxStatus:
		status = unshown("too long to read")
	case !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"):
		status = unshown("not shown (" + resp.Header.Get("Content-Type") + ")")
	case json.Unmarshal(body, &status) != nil || status.Kind != "Status":
		status = unshown("that is no status")
	}
	status.Message = HideValues(status.Message)
	if status.Details != nil {
		for i := range status.Details.Causes {
			status.Details.Causes[i].Message = HideValues(status.Details.Causes[i].Message)
		}
	}
	status.Kind, status.APIVersion = "Status", "v1"
	if body, err = json.Marshal(status); err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Del("Content-Encoding")
	return resp, nil
}

// refusedValue finds where a field error (k8s.io/apimachinery's field.Error) prints the value it
// refused: after its type, a string quoted, and an object or a list as JSON ({...}, [...]) or as
// Go prints it (core.PodTemplateSpec{...}, &core.PodSpec{...}, map[string]string{...},
// []string{...}).
var refusedValue = regexp.MustCompile(`(?:Invalid value|Unsupported value|Not found|Duplicate value|Too many|Too few): (?:["{\[&]|map\[|\(\*|[A-Za-z_][\w.]*\{)`)

// HideValues replaces each string, object or list a field error's message quotes (refusedValue)
// with ValueNotShown, to its end: a string's closing quote, or the bracket that balances an
// object's, outside strings. One cut short goes to the message's end.
func HideValues(msg string) string {
	var out strings.Builder
	for {
		loc := refusedValue.FindStringIndex(msg)
		if loc == nil {
			out.WriteString(msg)
			return out.String()
		}
		start := loc[0] + strings.Index(msg[loc[0]:], ": ") + 2
		out.WriteString(msg[:start])
		out.WriteString(ValueNotShown)
		msg = msg[start+valueEnd(msg[start:]):]
	}
}

// valueEnd is the length of the value at the start of s: a string alone, or up to a closing
// bracket that leaves none open and is not followed by more of a Go type or value
// (map[string]string{, (*T)(nil)), strings skipped; all of s when there is none.
func valueEnd(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' {
					i++
				}
			}
			if depth == 0 && i < len(s) {
				return i + 1 // a string alone
			}
		case '{', '[', '(':
			depth++
		case '}', ']', ')':
			if depth--; depth == 0 && (i+1 == len(s) || !strings.ContainsRune("{[(*._", rune(s[i+1])) && !isAlnum(s[i+1])) {
				return i + 1
			}
		}
	}
	return len(s)
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
