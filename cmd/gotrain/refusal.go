package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed"
	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/internal/resolve"
	"github.com/gotrain/gotrain/launch"
)

// A node of a static multi-node job that refuses to start tells the
// others why, so that they fail at once with its reason instead of
// waiting out their connect timeout for ranks that will never come:
// node 0 serves its reason on the rendezvous port for a moment (the
// others' ranks, retrying the store, find it there), another node posts
// it in node 0's store (node 0's ranks watch for it).
const (
	// refusalPost bounds how long a refused node tries to reach node 0's
	// store: the refusal itself is printed at once, this only delays the
	// exit.
	refusalPost = 2 * time.Second
	// refusalServe is how long a refused node 0 serves its reason: ranks
	// already retrying the store dial again within a second.
	refusalServe = 2 * time.Second
)

// refuseNode tells the other nodes of the job o describes why this node
// refused to start (refusal), when they can be told, and returns
// refusal. What it could do is one line on stderr.
func refuseNode(ctx context.Context, o *runOptions, f *pflag.FlagSet, stderr io.Writer, refusal error) error {
	nnodes, err := strconv.Atoi(o.nnodes)
	token := os.Getenv(launch.EnvToken)
	port := strconv.Itoa(o.masterPort)
	switch {
	case err != nil || nnodes < 2, o.standalone, f.Changed("rdzv-endpoint"):
		return refusal // one node, or an elastic job: nobody waits for this one
	case token == "", o.masterPort <= 0 || o.masterPort > 65535:
		return refusal // nobody could be reached or believed
	}
	job := o.runID
	if job == "" {
		job = "none"
	}
	r := distributed.Refusal{Node: o.nodeRank, Reason: strings.TrimPrefix(refusal.Error(), "gotrain: ")}
	if o.nodeRank == 0 {
		serveRefusal(ctx, port, token, job, r, stderr)
		return refusal
	}
	host := o.masterAddr
	if host == "" || strings.ContainsAny(host, " \t\n/") {
		return refusal
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h // --master-addr with a port: the port of --master-port still holds
	}
	if (strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil && net.ParseIP(host).IsLoopback()) && os.Getenv(launch.EnvAllowLoopback) != "1" {
		fmt.Fprintf(stderr, "gotrain: node %d could not tell node 0 why it refused: --master-addr %s leads to this machine, not node 0\n", o.nodeRank, o.masterAddr)
		return refusal
	}
	if errors.As(refusal, new(unresolvedMaster)) {
		return refusal // node 0's name is what does not resolve
	}
	addr := net.JoinHostPort(host, port)
	if err := postRefusal(ctx, addr, token, job, r); err != nil {
		fmt.Fprintf(stderr, "gotrain: node %d could not tell node 0 why it refused: %v\n", o.nodeRank, err)
		return refusal
	}
	fmt.Fprintf(stderr, "gotrain: node %d told node 0 (the store at %s) why it refused\n", o.nodeRank, addr)
	return refusal
}

// postRefusal records r in the store at addr, within refusalPost.
func postRefusal(ctx context.Context, addr, token, job string, r distributed.Refusal) error {
	ctx, cancel := context.WithTimeout(ctx, refusalPost)
	defer cancel()
	if host, _, _ := net.SplitHostPort(addr); host != "" {
		if _, err := resolve.Host(ctx, host); err != nil {
			return err
		}
	}
	tc, _ := tlsconf.LoadEnv(nil) // settings that do not load: plain TCP, which a TLS store reports as refused
	st, err := store.Dial(ctx, addr, []byte(token), store.WithTLS(tc))
	if err != nil {
		return err
	}
	defer st.Close()
	return distributed.PostRefusal(ctx, st, job, r)
}

// serveRefusal serves a store holding r on port for refusalServe, so
// that the other nodes' ranks, retrying node 0's store, read it. A port
// that is taken (by another node 0, or another program) serves nothing.
func serveRefusal(ctx context.Context, port, token, job string, r distributed.Refusal, stderr io.Writer) {
	tc, _ := tlsconf.LoadEnv(nil)
	srv, err := store.Listen(net.JoinHostPort("", port), []byte(token), store.WithTLS(tc))
	if err != nil {
		return
	}
	defer srv.Close()
	pctx, cancel := context.WithTimeout(ctx, refusalPost)
	defer cancel()
	st, err := store.Dial(pctx, net.JoinHostPort("127.0.0.1", port), []byte(token), store.WithTLS(tc))
	if err != nil {
		return
	}
	err = distributed.PostRefusal(pctx, st, job, r)
	st.Close()
	if err != nil {
		return
	}
	fmt.Fprintf(stderr, "gotrain: node 0 refused; telling the other nodes why on port %s for %v\n", port, refusalServe)
	t := time.NewTimer(refusalServe)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	// The ranks that read it close their connections as they fail.
	sctx, scancel := context.WithTimeout(context.Background(), time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
}

// checkMasterResolves refuses, in a multi-node job, a --master-addr
// that does not resolve after resolve's few tries: every rank would
// otherwise retry it for its whole connect timeout.
func checkMasterResolves(ctx context.Context, cfg launch.Config) error {
	if cfg.NNodes < 2 || cfg.MasterAddr == "" {
		return nil
	}
	if _, err := resolve.Host(ctx, cfg.MasterAddr); err != nil {
		return unresolvedMaster{badFlag("master-addr", cfg.MasterAddr, err.Error()).(usageError)}
	}
	return nil
}

// unresolvedMaster is the usage error of a --master-addr that does not
// resolve.
type unresolvedMaster struct{ usageError }

// As makes it a usageError too, for the exit status.
func (e unresolvedMaster) As(target any) bool {
	if p, ok := target.(*usageError); ok {
		*p = e.usageError
		return true
	}
	return false
}

// refuseAsWorker tells the other nodes why this process, a worker of a
// static multi-node job started by `gotrain run` on each node by hand,
// refused its command line (refusal) before it joined: the launcher
// checked only its own flags, so a job flag wrong on one node only is
// found here. Outside such a job it does nothing. It runs as the
// process exits, its command's context already ended: its own bounds
// (refusalPost, refusalServe) hold it.
func refuseAsWorker(stderr io.Writer, refusal error) {
	ctx := context.Background()
	env := func(k string) string { return os.Getenv(k) }
	world, err1 := strconv.Atoi(env(launch.EnvWorldSize))
	local, err2 := strconv.Atoi(env(launch.EnvLocalWorldSize))
	node, err3 := strconv.Atoi(env(launch.EnvGroupRank))
	localRank, err4 := strconv.Atoi(env(launch.EnvLocalRank))
	host, port, token := env("MASTER_ADDR"), env("MASTER_PORT"), env(launch.EnvToken)
	switch {
	case errors.Join(err1, err2, err3, err4) != nil, local >= world, host == "", port == "", token == "":
		return // not a worker of a multi-node job, or one that cannot reach the others
	case env(launch.EnvAgentStore) != "":
		return // a --hosts job: its launcher checked the job's flags before any node started
	}
	job := env(launch.EnvRunID)
	if job == "" {
		job = "default" // as distributed names a job without a run id
	}
	r := distributed.Refusal{Node: node, Reason: "rank " + env("RANK") + ": " + refusal.Error()}
	if node == 0 && localRank == 0 {
		serveRefusal(ctx, port, token, job, r, stderr) // this process would have served the store
		return
	}
	if err := postRefusal(ctx, net.JoinHostPort(host, port), token, job, r); err != nil {
		fmt.Fprintf(stderr, "gotrain: rank %s could not tell node 0 why it refused: %v\n", env("RANK"), err)
	}
}
