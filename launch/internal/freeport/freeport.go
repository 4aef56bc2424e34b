// Package freeport picks the TCP port a job's store will listen on, for
// the launchers that choose it (a standalone job, an elastic round).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// The range Pick draws from: below Linux's default ephemeral ports
// (32768 on), which any outgoing connection on the machine may take as
// its source port between the pick and the listen, and below the store's
// and the data plane's defaults (29500, 29600-29700).
const (
	Min = 20000
	Max = 29400
)

// Pick returns a port in [Min, Max) that is free on addr now, or, if 32
// tries find none, one the kernel picks. The port is closed again when
// Pick returns: another process could take it before the store listens,
// a window torchrun's agents have too; drawing outside the ephemeral
// range keeps it narrow.
func Pick(addr string) (int, error) {
	for range 32 {
		p := Min + rand.IntN(Max-Min)
		if l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(p))); err == nil {
			l.Close()
			return p, nil
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", addr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
