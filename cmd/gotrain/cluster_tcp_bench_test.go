package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/internal/testproc"
	"github.com/gotrain/gotrain/testing/clustertest"
)

// tcpWorker names the worker that measures the link's own ceiling for a
// two-rank allreduce: both ends send and receive the same bytes at once
// on one TCP connection, with nothing else to do. A ring allreduce of S
// bytes between two ranks sends and receives S bytes on each, so its
// busbw cannot pass this figure.
const tcpWorker = "tcpduplex"

func init() {
	if os.Getenv(testproc.WorkerEnv) == tcpWorker {
		if err := tcpDuplex(); err != nil {
			fmt.Fprintln(os.Stderr, "tcpduplex:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// tcpDuplex is one end: RANK 0 listens on MASTER_ADDR:MASTER_PORT and
// says so ("listening"), RANK 1 (started after that) dials it; for each
// size of TCP_SIZES both ends send and receive it at once, three times,
// and rank 0 prints the best as "op=tcp bytes= GBps=".
func tcpDuplex() error {
	addr := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
	var conn net.Conn
	if os.Getenv("RANK") == "0" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "listening")
		conn, err = ln.Accept()
		ln.Close()
		if err != nil {
			return err
		}
	} else {
		c, err := net.DialTimeout("tcp", addr, 30*time.Second)
		if err != nil {
			return err
		}
		conn = c
	}
	defer conn.Close()
	buf := make([]byte, 4<<20)
	in := make([]byte, 4<<20)
	exchange := func(n int) (time.Duration, error) {
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			var err error
			for left := n; left > 0 && err == nil; left -= len(buf) {
				_, err = conn.Write(buf[:min(left, len(buf))])
			}
			errc <- err
		}()
		for left := n; left > 0; {
			k, err := conn.Read(in[:min(left, len(in))])
			if err != nil {
				return 0, err
			}
			left -= k
		}
		if err := <-errc; err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	if _, err := exchange(8 << 20); err != nil { // warm up the windows
		return err
	}
	for _, s := range strings.Split(os.Getenv("TCP_SIZES"), ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		best := time.Duration(1 << 62)
		for range 3 {
			d, err := exchange(n)
			if err != nil {
				return err
			}
			best = min(best, d)
		}
		fmt.Printf("op=tcp bytes=%d GBps=%.3f\n", n, float64(n)/best.Seconds()/1e9)
	}
	return nil
}

// tcpCeiling runs tcpDuplex between the first two hosts of c and returns
// bytes → GB/s.
func tcpCeiling(b *testing.B, c *clustertest.Cluster, exe string, sizes []string) map[int]float64 {
	b.Helper()
	outs := onHosts(b, c, 2*time.Minute, "listening",
		func(int) []string { return []string{exe} },
		func(r int) []string {
			return []string{testproc.WorkerEnv + "=" + tcpWorker, "RANK=" + strconv.Itoa(r),
				"MASTER_ADDR=" + c.Hosts[0].Addr, "MASTER_PORT=29502", "TCP_SIZES=" + strings.Join(sizes, ",")}
		})
	m := map[int]float64{}
	for l := range strings.Lines(outs[0]) {
		var n int
		var bw float64
		if _, err := fmt.Sscanf(l, "op=tcp bytes=%d GBps=%f", &n, &bw); err == nil {
			m[n] = bw
		}
	}
	if len(m) != len(sizes) {
		b.Fatalf("tcpduplex printed %d results, want %d:\n%s", len(m), len(sizes), outs[0])
	}
	return m
}
