package databases

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientShellHandsOverAnyPassword runs the client shell with each shell there is here and a
// program that prints the variable it was given and the rest of stdin, for passwords a Secret may
// hold.
func TestClientShellHandsOverAnyPassword(t *testing.T) {
	passwords := []string{"plain", "ends in a newline\n", "two\nlines", "\n\n", `quotes ' " $HOME $(id) ` + "`id`" + ` back\slash \n`, "Pässwörd ✓", " spaces  ", "tab\tand\rreturn", "-n"}
	const rest = "|the rest of stdin"
	for _, shell := range []string{"sh", "bash", "dash"} {
		path, err := exec.LookPath(shell)
		if err != nil {
			continue
		}
		run := func(pw string, env []string) string {
			t.Helper()
			c := exec.Command(path, clientShell("MYSQL_PWD", "MYSQL_ROOT_PASSWORD", "sh", "-c", `printf %s "$MYSQL_PWD"; cat`)[1:]...)
			c.Env = env
			c.Stdin = strings.NewReader(credentials{password: pw}.passwordLine() + rest)
			out, err := c.Output()
			if err != nil {
				t.Fatalf("%s: %v", shell, err)
			}
			return string(out)
		}
		for _, pw := range passwords {
			if got := run(pw, nil); got != pw+rest {
				t.Errorf("%s: password %q came out as %q", shell, pw, strings.TrimSuffix(got, rest))
			}
		}
		// No password from a Secret: the image's own.
		if got := run("", []string{"MYSQL_ROOT_PASSWORD=the image's\n"}); got != "the image's\n"+rest {
			t.Errorf("%s: without a password: %q", shell, got)
		}
	}
}
