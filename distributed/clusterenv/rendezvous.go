package clusterenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/gotrain/gotrain/distributed/internal/pmi"
)

// masterKey is the PMI key under which rank 0 publishes host:port.
const masterKey = "gotrain-master"

// Rendezvous completes e where the environment alone cannot: under a PMI
// launcher (e.PMI) rank 0 publishes its host and a free port in the
// launcher's key-value space, every rank waits at the launcher's barrier
// and reads them, and e's MasterAddr, MasterPort and JobID are set. Every
// rank of the job must call it. Without PMI it does nothing.
func Rendezvous(ctx context.Context, e *Env, lookup Lookup) error {
	if !e.PMI {
		return nil
	}
	c, err := pmi.Dial(ctx, lookup)
	if err != nil {
		return fmt.Errorf("%w: rank %d: %w", ErrEnv, e.Rank, err)
	}
	err = exchange(ctx, c, e, lookup)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%w: rank %d: %w", ErrEnv, e.Rank, cerr)
	}
	return err
}

func exchange(ctx context.Context, c *pmi.Client, e *Env, lookup Lookup) error {
	if c.Size != 0 && (c.Rank != e.Rank || c.Size != e.WorldSize) {
		return fmt.Errorf("%w: the PMI launcher says rank %d of %d, the environment rank %d of %d", ErrEnv, c.Rank, c.Size, e.Rank, e.WorldSize)
	}
	if e.Rank == 0 {
		host, err := rank0Host(*e, lookup)
		if err != nil {
			return err
		}
		port := freePort(jobPort(c.KVSName()))
		if err := c.Put(ctx, masterKey, net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
			return fmt.Errorf("%w: rank 0: publish its address: %w", ErrEnv, err)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return fmt.Errorf("%w: rank %d: PMI barrier: %w", ErrEnv, e.Rank, err)
	}
	v, err := c.Get(ctx, masterKey)
	if err != nil {
		return fmt.Errorf("%w: rank %d: read rank 0's address: %w", ErrEnv, e.Rank, err)
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return fmt.Errorf("%w: rank %d: rank 0 published %q, not host:port", ErrEnv, e.Rank, v)
	}
	e.MasterAddr, e.MasterPort, e.JobID = host, port, "pmi-"+c.KVSName()
	return nil
}

// rank0Host is the host rank 0 tells the others: loopback when they all
// run here, else GOTRAIN_LISTEN_HOST, the host name Hydra gave this node
// (MPIR_CVAR_CH3_INTERFACE_HOSTNAME) or the host name.
func rank0Host(e Env, lookup Lookup) (string, error) {
	if !e.MultiNode() {
		return "127.0.0.1", nil
	}
	for _, v := range []string{"GOTRAIN_LISTEN_HOST", "MPIR_CVAR_CH3_INTERFACE_HOSTNAME"} {
		if h, ok := lookup(v); ok && h != "" {
			return h, nil
		}
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("%w: rank 0: its host name: %w (set GOTRAIN_LISTEN_HOST)", ErrEnv, err)
	}
	return h, nil
}

// freePort is the first port from start on that nothing listens on; rank
// 0 serves the store there right after. Starting from the job's own port
// keeps concurrent jobs apart.
func freePort(start int) int {
	for p := start; p < start+100 && p <= 65535; p++ {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err == nil {
			l.Close()
			return p
		}
	}
	return start
}
