package config

import (
	"net/url"
	"regexp"
	"strings"
)

// isCredentialName reports a name that, by convention, carries a credential: a query parameter,
// a flag or an assignment (compared in lower case, without '-' and '_').
func isCredentialName(name string) bool {
	switch strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(strings.TrimLeft(name, "-"))) {
	case "token", "accesstoken", "idtoken", "refreshtoken", "authtoken", "bearer",
		"password", "passwd", "pwd", "pass", "secret", "clientsecret",
		"apikey", "key", "accesskey", "secretkey", "privatekey", "credential", "credentials",
		"auth", "authorization", "sig", "signature", "xamzsignature", "xamzcredential", "xamzsecuritytoken":
		return true
	}
	return false
}

// credentialIn finds credentials in a setting that is stored in plaintext (ferry.yaml is stored
// with every backup and run): a URL's password or a credential query parameter, an argument
// --token=VALUE or --token VALUE, an assignment TOKEN=VALUE or token: VALUE in a script, an
// Authorization header's value. A value that is a shell variable ($NAME, ${NAME}) is a reference,
// not a credential. It returns the argument's index and what it found by name only ("query
// parameter token"), never the value.
func credentialIn(args []string) (index int, what string, found bool) {
	for i, arg := range args {
		if what, found = urlCredential(arg); found {
			return i, what, true
		}
		if isCredentialName(arg) && strings.HasPrefix(arg, "-") && i+1 < len(args) && !reference(args[i+1]) {
			return i, "argument " + arg + " with a value", true
		}
		for _, m := range assignment.FindAllStringSubmatch(arg, -1) {
			// "Authorization: Bearer X" is authHeader's to judge, by X.
			if isCredentialName(m[1]) && !reference(m[2]) && !strings.EqualFold(m[1], "authorization") {
				return i, m[1] + " with a value", true
			}
		}
		for _, m := range authHeader.FindAllStringSubmatch(arg, -1) {
			if !reference(m[1]) {
				return i, "an Authorization header with its credentials", true
			}
		}
	}
	return 0, "", false
}

var (
	// assignment is NAME=VALUE, --NAME=VALUE or NAME: VALUE, in an argument or inside a script.
	assignment = regexp.MustCompile(`(?i)(?:^|[\s"'&?;-])([a-z][-a-z0-9_]*)\s*(?:=|:\s)\s*["']?([^\s"'&;]+)`)
	// authHeader is an HTTP Authorization header with its credentials (after a scheme, if any).
	authHeader = regexp.MustCompile(`(?i)authorization\s*:\s*["']?(?:(?:bearer|basic|token)\s+)?["']?([^\s"']+)`)
	// urlInText finds URLs inside a longer argument (a script).
	urlInText = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"']+`)
)

// reference reports whether a value names where the credential is instead of being it.
func reference(v string) bool { return strings.HasPrefix(strings.Trim(v, `"'`), "$") }

// urlCredential finds a password or a credential query parameter in the URLs of s.
func urlCredential(s string) (string, bool) {
	for _, raw := range urlInText.FindAllString(s, -1) {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if u.User != nil {
			if p, has := u.User.Password(); has && !reference(p) {
				return "a password in a URL", true
			}
		}
		for name, values := range u.Query() {
			for _, v := range values {
				if isCredentialName(name) && v != "" && !reference(v) {
					return "query parameter " + name, true
				}
			}
		}
	}
	return "", false
}
