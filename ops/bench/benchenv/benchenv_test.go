package benchenv

import (
	"os/exec"
	"strings"
	"testing"
)

func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "go run ./ops/bench/x"},
		{[]string{"-sizes", "10000,100000", "-out", "ops/bench/results/x-2026-12-02.md"}, "go run ./ops/bench/x -sizes 10000,100000 -out ops/bench/results/x-2026-12-02.md"},
		{[]string{"-label", "before (commit e677ebe)"}, "go run ./ops/bench/x -label 'before (commit e677ebe)'"},
		{[]string{"-label", "it's"}, `go run ./ops/bench/x -label 'it'\''s'`},
		{[]string{"-label", ""}, "go run ./ops/bench/x -label ''"},
		// A DSN may hold a password: its value never appears, in either flag form.
		{[]string{"-dsn", "postgres://u:secret@h/db", "-sizes", "1"}, "go run ./ops/bench/x -dsn=… -sizes 1"},
		{[]string{"--dsn=postgres://u:secret@h/db"}, "go run ./ops/bench/x -dsn=…"},
	} {
		got := Command("ops/bench/x", tc.args)
		if got != tc.want {
			t.Errorf("Command(%q) = %s, want %s", tc.args, got, tc.want)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("Command(%q) shows the password: %s", tc.args, got)
		}
	}
}

// The quoting is what a shell reads back: a loop over the quoted words prints the arguments again.
func TestShellQuoteRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	args := []string{"plain", "with space", "it's", "", "$HOME", "a\"b", "semi;colon", "new\nline"}
	var quoted []string
	for _, a := range args {
		quoted = append(quoted, shellQuote(a))
	}
	script := "for a in " + strings.Join(quoted, " ") + `; do printf '%s\0' "$a"; done`
	out, err := exec.Command(sh, "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(args, "|") {
		t.Errorf("the shell reads %q back, want %q", got, args)
	}
}
