package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/testing/clustertest"
)

// TestClusterPreflightLossyLink: every host loses 5% of the packets it
// sends on the cluster's network, at random (as netem's loss does; nft
// here, which every kernel that runs the cluster has): pre-flight
// measures the loss, warns with the rate, and the job trains.
func TestClusterPreflightLossyLink(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	for _, h := range c.Hosts {
		h.Nft(t, fmt.Sprintf("table inet gotrain_h5loss {\n chain output {\n  type filter hook output priority 0; policy accept;\n  oifname %q numgen random mod 100 < 5 drop\n }\n}\n", h.Dev))
	}
	all, _, code := runGotrain(t, 150*time.Second, mnistOnHosts(c, 1, "--max-steps", "2")...)
	if strings.Contains(all, "pre-flight check failed") {
		t.Fatalf("pre-flight refused a job on a link that loses 5%%:\n%s", all)
	}
	if code != 0 {
		t.Fatalf("exit code %d:\n%s", code, all)
	}
	rate := regexp.MustCompile(`host \S+ → host \S+ \([^)]*\): \d+ of \d+ probes lost \(\d+\.\d%\)`)
	warned := false
	for l := range strings.Lines(all) {
		if rate.MatchString(l) && strings.Contains(l, "WARN") {
			warned = true
			t.Logf("warning: %s", strings.TrimSpace(l))
		}
	}
	if !warned {
		t.Errorf("no warning names the measured loss of a pair of hosts:\n%s", all)
	}
	if !strings.Contains(all, "[rank0]") {
		t.Errorf("no rank ran:\n%s", all)
	}
}

// TestClusterRemoteGotrainNotGotrain: a --remote-gotrain that is not
// gotrain (/bin/true) is one line per host saying what it did instead of
// answering.
func TestClusterRemoteGotrainNotGotrain(t *testing.T) {
	c := newCluster(t, 2, clustertest.Options{})
	all, _, code := runGotrain(t, 60*time.Second, mnistOnHosts(c, 1, "--max-steps", "2", "--remote-gotrain", "/bin/true")...)
	if code == 0 {
		t.Fatalf("exit code 0:\n%s", all)
	}
	for _, h := range c.Hosts {
		l := firstLineWith(all, "host "+h.Addr+":")
		if !strings.Contains(l, "/bin/true preflight-node exited with status 0 without answering (it wrote nothing on stdout)") {
			t.Errorf("no line names %s and what /bin/true did:\n%s", h.Addr, all)
		} else {
			t.Logf("%s", l)
		}
	}
	if strings.Contains(all, "[rank") {
		t.Errorf("a worker started:\n%s", all)
	}
}
