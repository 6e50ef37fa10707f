package config

import "testing"

// Credentials in settings ferry stores in plaintext are found, by name, in every form an exec
// command or URL carries them; references to them ($NAME) and ordinary arguments are not.
func TestCredentialIn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		index int
		what  string // "" for none
	}{
		{"plain command", []string{"set-weights", "--backend", "app", "--blue", "90"}, 0, ""},
		{"script with a token variable", []string{"sh", "-c", `curl -fsS -H "Authorization: Bearer $LB_TOKEN" https://lb.example/split`}, 0, ""},
		{"token flag from the environment", []string{"set-weights", "--token", "${LB_TOKEN}"}, 0, ""},
		{"json patch", []string{"kubectl", "patch", "svc", "web", "-p", `{"spec":{"selector":{"key":"green"}}}`}, 0, ""},
		{"the word basic", []string{"echo", "basic setup, bearer of news"}, 0, ""},
		{"raw authorization", []string{"curl", "-H", "authorization: s3cr3t", "https://lb/x"}, 2, "an Authorization header"},
		{"token file", []string{"set-weights", "--token-file", "/var/run/token"}, 0, ""},
		{"query without credentials", []string{"https://lb.example/split?pool=web&weight=10"}, 0, ""},
		{"token flag", []string{"set-weights", "--token", "s3cr3t"}, 1, "argument --token with a value"},
		{"token flag with =", []string{"set-weights", "--api-key=s3cr3t"}, 1, "api-key with a value"},
		{"assignment", []string{"env", "PASSWORD=s3cr3t", "set-weights"}, 1, "PASSWORD with a value"},
		{"bearer in a script", []string{"sh", "-c", "curl -H 'Authorization: Bearer abc.def' https://lb/x"}, 2, "an Authorization header"},
		{"basic in an argument", []string{"curl", "-H", "Authorization: Basic dXNlcjpwYXNz", "https://lb/x"}, 2, "an Authorization header"},
		{"password in a URL", []string{"curl", "https://ops:s3cr3t@lb.example/split"}, 1, "a password in a URL"},
		{"token in a query", []string{"curl", "https://lb.example/split?token=s3cr3t"}, 1, "query parameter token"},
		{"presigned URL", []string{"curl", "https://s3.example/b/k?X-Amz-Credential=AK%2F1&X-Amz-Signature=ab"}, 1, "query parameter X-Amz-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, what, found := credentialIn(tc.args)
			if found != (tc.what != "") || found && (i != tc.index || len(what) < len(tc.what) || what[:len(tc.what)] != tc.what) {
				t.Errorf("credentialIn = %d, %q, %v; want %d, %q", i, what, found, tc.index, tc.what)
			}
		})
	}
}
