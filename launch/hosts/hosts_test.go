package hosts

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Host
	}{
		{"node0", []Host{{"node0", 0}}},
		{"node0:2,node1:4", []Host{{"node0", 2}, {"node1", 4}}},
		{" node0:2 , alice@node1 ", []Host{{"node0", 2}, {"alice@node1", 0}}},
		{"10.0.0.1:2,10.0.0.2", []Host{{"10.0.0.1", 2}, {"10.0.0.2", 0}}},
		{"[fd00::1]:3,bob@[fd00::2]", []Host{{"fd00::1", 3}, {"bob@fd00::2", 0}}},
	} {
		got, err := Parse(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty entry"},
		{"a,,b", "empty entry"},
		{"a:0", "at least 1"},
		{"a:-2", "at least 1"},
		{"a:two", `got "two"`},
		{"a:", `got ""`},
		{"fd00::1", "in brackets"},
		{"[fd00::1", "unclosed"},
		{"[fd00::1]x", "[ADDRESS]:SLOTS"},
		{"a:2,a:3", "listed twice"},
		{"-oProxyCommand=x", "cannot start with '-'"},
		{"a b", "shell characters"},
		{"a;rm", "shell characters"},
		{"@a", "empty user"},
		{":2", "no host name"},
	} {
		_, err := Parse(tc.in)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) error %v; want one line with %q", tc.in, err, tc.want)
		}
	}
}

// TestSyntaxError: a malformed list is a *SyntaxError naming the entry
// at fault, whose message is ErrSyntax's and the reason.
func TestSyntaxError(t *testing.T) {
	for _, tc := range []struct {
		err   func() error
		entry string
	}{
		{func() error { _, err := Parse("node0:2, node1:x"); return err }, "node1:x"},
		{func() error { _, err := Parse("a,,b"); return err }, "a,,b"},
		{func() error { _, err := Parse("a,b,a"); return err }, "a"},
		{func() error { _, err := ParseFile(strings.NewReader("a\n b  cpus=2 # two\n"), "hf"); return err }, "b  cpus=2"},
		{func() error { _, err := ParseFile(strings.NewReader("-a slots=1\n"), "hf"); return err }, "-a slots=1"},
		{func() error { _, err := ParseFile(strings.NewReader(""), "hf"); return err }, "hf"},
	} {
		err := tc.err()
		var se *SyntaxError
		if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) {
			t.Errorf("%v: not a *SyntaxError matching ErrSyntax", err)
			continue
		}
		if se.Entry != tc.entry || se.Reason == "" || err.Error() != ErrSyntax.Error()+": "+se.Reason {
			t.Errorf("%v: Entry %q, Reason %q; want Entry %q and the message ErrSyntax's and the reason", err, se.Entry, se.Reason, tc.entry)
		}
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); errors.Is(err, ErrSyntax) {
		t.Errorf("a missing hostfile: %v matches ErrSyntax", err)
	}
}

func TestParseFile(t *testing.T) {
	const file = `# the cluster
node0 slots=2   # the first host is node 0
alice@node1 slots=4 max_slots=8

[fd00::3]
`
	got, err := ParseFile(strings.NewReader(file), "hostfile")
	want := []Host{{"node0", 2}, {"alice@node1", 4}, {"fd00::3", 0}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseFile = %v, %v; want %v", got, err, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"# nothing\n", "lists no host"},
		{"node0 slots=0\n", "hostfile:1: slots must be"},
		{"node0\nnode1 cpus=2\n", `hostfile:2: unknown field "cpus=2"`},
		{"node0\nnode0\n", "listed twice"},
		{"$(reboot)\n", "shell characters"},
	} {
		_, err := ParseFile(strings.NewReader(tc.in), "hostfile")
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFile(%q) error %v; want %q", tc.in, err, tc.want)
		}
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte("a slots=1\nb slots=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadFile(path); err != nil || len(got) != 2 || got[1].Slots != 2 {
		t.Fatalf("ReadFile = %v, %v", got, err)
	}
	if _, err := ReadFile(path + ".missing"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("ReadFile of a missing file: %v", err)
	}
}

func TestHostString(t *testing.T) {
	for _, h := range []Host{{"node0", 2}, {"alice@fd00::1", 3}, {"fd00::2", 0}} {
		back, err := Parse(h.String())
		if err != nil || len(back) != 1 || back[0] != h {
			t.Errorf("Parse(%q) = %v, %v; want %v", h.String(), back, err, h)
		}
	}
	if a := (Host{Name: "alice@node1"}).Addr(); a != "node1" {
		t.Errorf("Addr = %q", a)
	}
}
