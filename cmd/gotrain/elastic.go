package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed/tlsconf"
	"github.com/gotrain/gotrain/launch"
	"github.com/gotrain/gotrain/launch/rendezvous"
	"github.com/gotrain/gotrain/launch/rendezvous/etcd"
)

// elasticFlags are `gotrain run`'s elastic rendezvous flags, torchrun's:
// --nnodes MIN:MAX with --rdzv-backend, --rdzv-endpoint, --rdzv-id (the
// run id), --rdzv-conf and --local-addr.
type elasticFlags struct {
	backend  string
	endpoint string
	conf     string
	local    string

	// Set by nnodes when the job is elastic.
	on     bool
	rdzv   rendezvous.Config
	isHost *bool
}

// elasticKeys are the --rdzv-conf keys.
var elasticKeys = []string{"last_call_timeout", "join_timeout", "keep_alive_interval", "keep_alive_max_attempts", "is_host"}

// defaultKeepAliveAttempts is keep_alive_max_attempts when --rdzv-conf
// leaves it out: the heartbeats a node may miss before the others drop
// it, as the rendezvous' own defaults have it.
const defaultKeepAliveAttempts = int(rendezvous.DefaultDeadAfter / rendezvous.DefaultHeartbeatInterval)

// nnodes parses --nnodes and, for an elastic job (a MIN:MAX range, or
// --rdzv-endpoint or a dynamic --rdzv-backend given), checks the
// rendezvous flags and returns 1, with run's static place (the flags of
// f bound to it) back at its defaults, so that the static checks pass:
// each round sets the node's place. A static job gets parseNNodes's
// result.
func (o *elasticFlags) nnodes(f *pflag.FlagSet, run *runFlags) (int, error) {
	s, nodeRank := run.nnodes, run.nodeRank
	lo, hi, isRange := strings.Cut(s, ":")
	minN, err1 := strconv.Atoi(lo)
	maxN, err2 := minN, error(nil)
	if isRange {
		maxN, err2 = strconv.Atoi(hi)
	}
	switch o.backend {
	case "", "static", "c10d", "etcd":
	default:
		return 0, badFlag("rdzv-backend", o.backend, "must be static, c10d or etcd")
	}
	dynamic := o.endpoint != "" || o.backend == "c10d" || o.backend == "etcd"
	if !dynamic && (f.Changed("rdzv-conf") || f.Changed("local-addr")) {
		return 0, flagNeeds("rdzv-conf", "--rdzv-conf and --local-addr are for an elastic job, with --rdzv-endpoint")
	}
	if err1 != nil || err2 != nil || !dynamic && (!isRange || minN == maxN) {
		n, err := parseNNodes(s)
		if err != nil {
			return 0, badFlag("nnodes", s, err.Error())
		}
		return n, nil
	}
	switch {
	case minN < 1:
		return 0, badFlag("nnodes", s, "MIN must be at least 1")
	case minN > maxN:
		return 0, badFlag("nnodes", s, "MIN is more than MAX")
	case o.backend == "static":
		return 0, badFlag("rdzv-backend", o.backend, "cannot re-form a group; an elastic --nnodes MIN:MAX needs c10d or etcd")
	case o.endpoint == "":
		return 0, flagNeeds("nnodes", "an elastic job (--nnodes "+s+") needs --rdzv-endpoint HOST:PORT, where the nodes meet")
	case typed(f, "node-rank"):
		return 0, badFlag("node-rank", nodeRank, "the rendezvous assigns node ranks in an elastic job; leave it out")
	case typed(f, "master-addr") || typed(f, "master-port"):
		return 0, flagNeeds("master-addr", "the rendezvous chooses the master in an elastic job; leave --master-addr and --master-port out")
	case f.Changed("standalone"):
		return 0, flagNeeds("standalone", "runs a single node on its own; it cannot join --rdzv-endpoint")
	case !f.Changed("run-id"):
		return 0, flagNeeds("rdzv-id", "an elastic job needs --rdzv-id ID, the same on every node and new for each job")
	}
	if o.backend == "" {
		o.backend = "c10d"
	}
	// A place from PET_ variables gives way to the rendezvous'.
	for _, name := range []string{"node-rank", "master-addr", "master-port"} {
		fl := f.Lookup(name)
		_ = fl.Value.Set(fl.DefValue) // a default parses
	}
	for _, ep := range strings.Split(o.endpoint, ",") {
		if h, p, err := net.SplitHostPort(ep); err != nil || h == "" || p == "" {
			return 0, badFlag("rdzv-endpoint", o.endpoint, "want HOST:PORT")
		} else if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return 0, badFlag("rdzv-endpoint", o.endpoint, "port must be in [1, 65535]")
		}
	}
	if o.backend == "c10d" && strings.Contains(o.endpoint, ",") {
		return 0, badFlag("rdzv-endpoint", o.endpoint, "the c10d backend takes one HOST:PORT")
	}
	if o.local != "" && net.ParseIP(o.local) == nil && strings.ContainsAny(o.local, ":/ ") {
		return 0, badFlag("local-addr", o.local, "must be a host name or IP address")
	}
	if err := o.parseConf(); err != nil {
		return 0, err
	}
	o.on, o.rdzv.MinNodes, o.rdzv.MaxNodes = true, minN, maxN
	return 1, nil
}

// typed reports whether flag name was given on the command line, not by
// its PET_ variable: a Kubeflow operator may set PET_MASTER_ADDR or
// PET_NODE_RANK beside an elastic job's PET_RDZV_ENDPOINT, and the
// rendezvous' values win over them.
func typed(f *pflag.FlagSet, name string) bool {
	_, fromEnv := lookupEnv(petName(name))
	return f.Changed(name) && !fromEnv
}

// parseConf reads --rdzv-conf into o.rdzv.
func (o *elasticFlags) parseConf() error {
	if o.conf == "" {
		return nil
	}
	interval, attempts := rendezvous.DefaultHeartbeatInterval, defaultKeepAliveAttempts
	for _, kv := range strings.Split(o.conf, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return badFlag("rdzv-conf", o.conf, fmt.Sprintf("%q is not key=value", kv))
		}
		if !slices.Contains(elasticKeys, k) {
			return badFlag("rdzv-conf", o.conf, "unknown key "+k+" (want "+orList(elasticKeys)+")")
		}
		if k == "is_host" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return badFlag("rdzv-conf", o.conf, "is_host must be true or false")
			}
			o.isHost = &b
			continue
		}
		if k == "keep_alive_max_attempts" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return badFlag("rdzv-conf", o.conf, "keep_alive_max_attempts must be an integer at least 1")
			}
			attempts = n
			continue
		}
		d, err := parseInterval(v)
		if err != nil {
			return badFlag("rdzv-conf", o.conf, k+" "+err.Error())
		}
		switch k {
		case "last_call_timeout":
			o.rdzv.LastCall = d
		case "join_timeout":
			o.rdzv.JoinTimeout = d
		case "keep_alive_interval":
			interval = d
		}
	}
	o.rdzv.HeartbeatInterval = interval
	o.rdzv.DeadAfter = interval * time.Duration(attempts)
	return nil
}

// attach connects an elastic job's node to its rendezvous and sets
// cfg.Rendezvous; the returned function leaves it. It does nothing for a
// static job.
func (o *elasticFlags) attach(ctx context.Context, f *pflag.FlagSet, cfg *launch.Config) (func(), error) {
	if !o.on {
		return func() {}, nil
	}
	env := orEnviron(cfg.Env)
	token := lookup(env, launch.EnvToken)
	if token == "" && o.rdzv.MaxNodes > 1 {
		return nil, usagef("run: an elastic job of up to %d nodes needs the same %s on every node; set it, e.g. %s=$(openssl rand -hex 32)",
			o.rdzv.MaxNodes, launch.EnvToken, launch.EnvToken)
	}
	// The launchers' store runs with the workers' TLS settings.
	tc, err := tlsconf.LoadEnv(func(k string) (string, bool) { v := lookup(env, k); return v, v != "" })
	if err != nil {
		return nil, usagef("run: %v", err)
	}
	local := o.local
	if local == "" {
		var err error
		if local, err = addrTowards(strings.Split(o.endpoint, ",")[0]); err != nil {
			return nil, err
		}
	}
	var b rendezvous.Backend
	switch o.backend {
	case "etcd":
		b, err = etcd.Dial(ctx, strings.Split(o.endpoint, ","), cfg.RunID, o.rdzv.DeadAfter)
	default:
		b, err = rendezvous.StoreEndpoint(ctx, rendezvous.StoreConfig{Endpoint: o.endpoint, Token: []byte(token), TLS: tc,
			RunID: cfg.RunID, Host: o.isHost, DeadAfter: o.rdzv.DeadAfter, Logger: cfg.Logger})
	}
	if err != nil {
		return nil, fmt.Errorf("run: rendezvous at %s: %w", o.endpoint, err)
	}
	rc := o.rdzv
	rc.RunID, rc.Addr, rc.NProc, rc.Logger = cfg.RunID, local, cfg.NProcPerNode, cfg.Logger
	rz, err := rendezvous.New(ctx, b, rc)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("run: %w", err)
	}
	cfg.Rendezvous = rz
	return func() { rz.Close() }, nil
}

// addrTowards is the local address this machine reaches endpoint from
// (a UDP "connection" sends nothing; it only picks the route).
func addrTowards(endpoint string) (string, error) {
	c, err := net.Dial("udp", endpoint)
	if err != nil {
		return "", flagNeeds("local-addr", "cannot tell this node's address from the route to "+endpoint+" ("+rootCause(err)+"); give --local-addr")
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// orEnviron is env, or the process's environment if env is nil.
func orEnviron(env []string) []string {
	if env == nil {
		return os.Environ()
	}
	return env
}

// lookup is the value of key in env (the last one wins), or "".
func lookup(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
