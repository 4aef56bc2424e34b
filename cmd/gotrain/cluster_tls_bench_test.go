package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// cipherLine is what `gotrain bench` prints about the data plane's TLS.
var cipherLine = regexp.MustCompile(`bench: data plane over (TLS [0-9.]+ \S+)`)

// BenchmarkClusterTLSAllreduce: `gotrain bench allreduce --algo ring`
// with and without mutual TLS (certificates of `gotrain tls init`), side
// by side: two ranks on loopback (shared memory off, so the bytes cross
// TCP), and one rank on each of two hosts of a clustertest over plain
// veth and over the shaped 1 Gbit/s link (see shapeLink), over ssh as a
// user runs it. Sizes: $TLS_BENCH_SIZES (bytes, comma-separated;
// default 16 and 64 MiB). Metrics per size: plain and TLS busbw (GB/s)
// and TLS/plain (targets: ≥ 0.85 shaped, ≥ 0.6 veth); the log names the
// negotiated cipher suite.
func BenchmarkClusterTLSAllreduce(b *testing.B) {
	sizes := os.Getenv("TLS_BENCH_SIZES")
	if sizes == "" {
		sizes = "16777216,67108864"
	}
	bin := buildGotrain(b)
	for _, link := range []string{"loopback", "veth", "shaped"} {
		b.Run(link, func(b *testing.B) {
			var c *clustertest.Cluster
			hosts := "127.0.0.1"
			if link != "loopback" {
				c = clustertest.New(b, clustertest.Options{Hosts: 2})
				if link == "shaped" {
					shapeLink(b, c)
				}
				hosts = c.Hosts[0].Addr + "," + c.Hosts[1].Addr
			}
			dir := filepath.Join(b.TempDir(), "tls")
			if err := tlsconf.Generate(dir, strings.Split(hosts, ","), 24*time.Hour); err != nil {
				b.Fatal(err)
			}
			tlsArgs := []string{"--tls-ca", filepath.Join(dir, tlsconf.CAFile),
				"--tls-cert", filepath.Join(dir, tlsconf.CertFile(tlsconf.HostPattern)),
				"--tls-key", filepath.Join(dir, tlsconf.KeyFile(tlsconf.HostPattern))}
			run := func(withTLS bool) (map[int]float64, string) {
				args := []string{"bench", "allreduce", "--algo", "ring", "--sizes", sizes}
				if c != nil {
					args = append(append(args, "--hosts", hostList(c, 1)), c.SSHFlags()...)
				} else {
					args = append(args, "--nproc", "2")
				}
				if withTLS {
					args = append(args, tlsArgs...)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, testproc.WorkerEnv+"=") })
				// Loopback: no shared memory, and {host} is the loopback
				// address the certificate was made for.
				cmd.Env = append(cmd.Env, "GOTRAIN_SHM=0", tlsconf.EnvHost+"=127.0.0.1")
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("gotrain %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				cipher := ""
				if m := cipherLine.FindSubmatch(out); m != nil {
					cipher = string(m[1])
				}
				if withTLS && cipher == "" {
					b.Fatalf("gotrain bench with TLS named no cipher suite:\n%s", out)
				}
				return busbw(b, string(out)), cipher
			}
			for i := 0; i < b.N; i++ {
				plain, _ := run(false)
				secure, cipher := run(true)
				b.Logf("%s: cipher suite %s", link, cipher)
				for _, s := range strings.Split(sizes, ",") {
					n, _ := strconv.Atoi(s)
					if plain[n] == 0 || secure[n] == 0 {
						b.Fatalf("no result for %d bytes: plain %v, TLS %v", n, plain, secure)
					}
					tag := fmt.Sprintf("%dB", n)
					if n%(1<<20) == 0 {
						tag = fmt.Sprintf("%dMiB", n>>20)
					}
					b.ReportMetric(plain[n], "plain_busbw_GBps_"+tag)
					b.ReportMetric(secure[n], "tls_busbw_GBps_"+tag)
					b.ReportMetric(secure[n]/plain[n], "tls_over_plain_"+tag)
				}
			}
		})
	}
}
