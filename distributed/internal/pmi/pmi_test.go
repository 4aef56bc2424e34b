package pmi

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	m := ParseLine("cmd=get_result rc=0 value=10.0.0.1:15000\n")
	if m["cmd"] != "get_result" || m["rc"] != "0" || m["value"] != "10.0.0.1:15000" {
		t.Errorf("ParseLine: %v", m)
	}
}

// The wire format of each command, as a launcher reads it.
func TestWire(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	var got []string
	go func() {
		rd := bufio.NewReader(b)
		answers := map[string]string{
			"init":           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
			"get_my_kvsname": "cmd=my_kvsname kvsname=kvs_7_0",
			"put":            "cmd=put_result rc=0",
			"barrier_in":     "cmd=barrier_out",
			"get":            "cmd=get_result rc=0 value=v1",
			"finalize":       "cmd=finalize_ack",
		}
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			got = append(got, strings.TrimSpace(line))
			b.Write([]byte(answers[ParseLine(line)["cmd"]] + "\n"))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := NewClient(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if c.KVSName() != "kvs_7_0" {
		t.Errorf("kvsname %q", c.KVSName())
	}
	if err := c.Put(ctx, "k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(ctx, "k", "has space"); err == nil {
		t.Error("a value with a space was sent")
	}
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "k"); err != nil || v != "v1" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"cmd=init pmi_version=1 pmi_subversion=1", "cmd=get_my_kvsname", "cmd=put kvsname=kvs_7_0 key=k value=v1",
		"cmd=barrier_in", "cmd=get kvsname=kvs_7_0 key=k", "cmd=finalize"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("sent\n%v\nwant\n%v", got, want)
	}
}

func TestDialNeedsALauncher(t *testing.T) {
	_, err := Dial(context.Background(), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "neither PMI_FD nor PMI_PORT") {
		t.Errorf("Dial without a launcher: %v", err)
	}
	_, err = Dial(context.Background(), func(k string) (string, bool) {
		if k == "PMI_FD" {
			return "x", true
		}
		return "", false
	})
	if err == nil || !strings.Contains(err.Error(), `PMI_FD="x"`) {
		t.Errorf("Dial with PMI_FD=x: %v", err)
	}
}
