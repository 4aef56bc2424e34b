package distributed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/transport/tcp"
	"github.com/gotrain/gotrain/distributed/shm"
	"github.com/gotrain/gotrain/distributed/store"
)

// Init joins the process group described by cfg: it reaches the store
// (serving it on rank 0 for env:// and tcp://), checks that every rank
// agrees on the world size and that no rank is taken twice, and connects
// the full mesh of authenticated data connections. It returns once every
// rank is connected, or an error naming what is wrong after at most
// cfg.ConnectTimeout.
//
// The master address is checked before anything waits. A rank that finds
// a setup mistake (a world size or rank that disagrees, a peer it cannot
// reach or that refuses it, a connection the store refused for a wrong
// token or protocol version) records it in the store, and every rank
// that has reached the store fails at once with that reason and the
// ranks that have not joined.
func Init(ctx context.Context, cfg Config) (*Group, error) {
	cfg, env, err := cfg.resolve(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	owner, err := openStore(ctx, cfg, env)
	if err != nil {
		return nil, err
	}
	g, err := connect(ctx, cfg, "", cfg.Rank, cfg.WorldSize, owner)
	if owner.srv != nil {
		owner.srv.OnRefused(nil) // after the rendezvous a refused client is only a stray
	}
	if err != nil {
		if owner.srv != nil && cfg.WorldSize > 1 {
			// Ranks still starting would find no store and wait out their
			// connect timeout: serve the recorded failure a little longer.
			t := time.NewTimer(failureLinger)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		owner.close()
		return nil, err
	}
	g.owner = owner
	g.dumpOnSignal()
	return g, nil
}

// storeOwner holds the default group's store client and, on the rank that
// serves it, the server.
type storeOwner struct {
	st        store.Store
	srv       *store.Server
	prefix    string // "gotrain/<job>/<restart>/"
	advertise string // host peers dial for this rank's data plane
	listenErr error  // why rank 0 could not serve the store (another rank 0 does)
}

func (o *storeOwner) close() error {
	err := o.st.Close()
	if o.srv != nil {
		if serr := o.srv.Close(); err == nil {
			err = serr
		}
	}
	return err
}

// storeLinger bounds how long rank 0's Destroy keeps serving the store
// for ranks still connected to it.
const storeLinger = 2 * time.Second

// leave is close for a group that formed: rank 0 serves the store until
// the other ranks' clients have gone, for at most storeLinger, so that no
// rank loses the answer to its last request (its set-up's, say) to a
// store closed under it.
func (o *storeOwner) leave() error {
	if o.srv == nil {
		return o.st.Close()
	}
	err := o.st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), storeLinger)
	defer cancel()
	// Past the bound the remaining clients are cut, as Close would.
	if serr := o.srv.Shutdown(ctx); err == nil && !errors.Is(serr, context.DeadlineExceeded) {
		err = serr
	}
	return err
}

// openStore reaches the store of cfg.InitMethod.
func openStore(ctx context.Context, cfg Config, env storeEnv) (*storeOwner, error) {
	o := &storeOwner{prefix: "gotrain/" + cfg.JobID + "/" + env.restart + "/"}
	method := cfg.InitMethod
	u, err := url.Parse(method)
	if err != nil || u.Scheme == "" || !strings.Contains(method, "://") {
		return nil, fmt.Errorf("%w: malformed init method %q: want env://, tcp://host:port or file:///path", ErrConfig, method)
	}
	var addr string
	switch u.Scheme {
	case "env":
		if cfg.alone {
			o.st, o.advertise = store.NewMem(), cfg.ListenHost
			return o, nil
		}
		host, port := env.masterHost, env.masterPort
		if err := checkMasterHost("MASTER_ADDR", host, cfg.WorldSize, env); err != nil {
			return nil, err
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("%w: env:// needs MASTER_ADDR and MASTER_PORT (got %q and %q)", ErrConfig, host, port)
		}
		addr = net.JoinHostPort(host, port)
	case "tcp":
		if u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("%w: malformed init method %q: want tcp://host:port", ErrConfig, method)
		}
		if err := checkMasterHost("the host of "+method, u.Hostname(), cfg.WorldSize, env); err != nil {
			return nil, err
		}
		addr = u.Host
	case "file":
		if u.Path == "" || u.Host != "" {
			return nil, fmt.Errorf("%w: malformed init method %q: want file:///absolute/path", ErrConfig, method)
		}
		f, err := store.NewFile(u.Path)
		if err != nil {
			return nil, fmt.Errorf("distributed: rank %d: open the file store: %w", cfg.Rank, err)
		}
		o.st = f
		if o.advertise, err = advertise(cfg, env, "", ""); err != nil {
			f.Close()
			return nil, err
		}
		return o, nil
	default:
		return nil, fmt.Errorf("%w: unknown init method scheme %q in %q: want env://, tcp://host:port or file:///path", ErrConfig, u.Scheme, method)
	}
	host, port, err := net.SplitHostPort(addr)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("%w: bad master address %q", ErrConfig, addr)
	}
	token := []byte(cfg.Token)
	var listenErr error
	if cfg.Rank == 0 && !cfg.AgentStore {
		srv, err := store.Listen(net.JoinHostPort("", port), token, store.WithTLS(cfg.tls))
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			// Another rank 0 (two nodes given the same --node-rank) may
			// serve it: join that store so the duplicate rank is found
			// and reported to every rank.
			listenErr = err
		case err != nil:
			return nil, fmt.Errorf("distributed: rank 0: serve the store on port %s (MASTER_PORT): %w", port, err)
		}
		o.srv = srv
	}
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if listenErr != nil {
		// Another rank 0's store answers at once; a port taken by
		// something else must not hold this rank for the whole timeout.
		dctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	}
	st, err := store.Dial(dctx, addr, token, store.WithTLS(cfg.tls))
	cancel()
	if err != nil {
		if o.srv != nil {
			o.srv.Close()
		}
		if listenErr != nil {
			return nil, fmt.Errorf("distributed: rank 0: serve the store on port %s (MASTER_PORT): %w; nor is a store of this job there: %w", port, listenErr, err)
		}
		return nil, fmt.Errorf("distributed: rank %d: connect to the store at %s within %v: %w%s", cfg.Rank, addr, cfg.ConnectTimeout, err, storeHint(err))
	}
	o.st = st
	o.listenErr = listenErr
	if o.advertise, err = advertise(cfg, env, host, port); err != nil {
		o.close()
		return nil, err
	}
	if o.srv != nil {
		group := store.Prefix(st, o.prefix+"group/")
		o.srv.OnRefused(func(remote net.Addr, err error) {
			recordFailure(group, setupFailure{Rank: -1, Config: true,
				Reason: fmt.Sprintf("the store on rank 0 refused a connection from %v: %v", remote, err)})
		})
	}
	return o, nil
}

// checkMasterHost refuses, before anything waits, a master host that
// cannot be right: one with a port in it, and in a multi-node job (fewer
// ranks on this host than in the world) an empty or loopback one, which
// the other nodes cannot reach.
func checkMasterHost(what, host string, worldSize int, env storeEnv) error {
	if h, p, err := net.SplitHostPort(host); err == nil {
		return fmt.Errorf("%w: %s=%q holds a port: put the host (%s) there and the port (%s) in MASTER_PORT", ErrConfig, what, host, h, p)
	}
	multiNode := env.localWorldSize > 0 && env.localWorldSize < worldSize
	if !multiNode {
		return nil
	}
	switch {
	case host == "":
		return fmt.Errorf("%w: %s is empty in a multi-node job (LOCAL_WORLD_SIZE=%d, WORLD_SIZE=%d): set node 0's address", ErrConfig, what, env.localWorldSize, worldSize)
	case isLoopback(host) && !env.allowLoopback:
		return fmt.Errorf("%w: %s=%s is a loopback address in a multi-node job (LOCAL_WORLD_SIZE=%d, WORLD_SIZE=%d): the other nodes cannot reach it, and rank 0 would advertise loopback to them; use node 0's network address (GOTRAIN_ALLOW_LOOPBACK=1 if every node is on this host)",
			ErrConfig, what, host, env.localWorldSize, worldSize)
	}
	return nil
}

// isLoopback reports whether host names this machine's loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// connect registers this rank in the group's namespace, validates the
// rank and world size against the other ranks', and connects the mesh.
// It watches the group's failure key meanwhile: a mistake another rank
// records ends this rank's rendezvous at once, and one this rank finds
// is recorded for the others.
func connect(ctx context.Context, cfg Config, id string, rank, size int, owner *storeOwner) (*Group, error) {
	st := store.Prefix(owner.st, owner.prefix+"group"+id+"/")
	where := fmt.Sprintf("distributed: rank %d", rank)
	if id != "" {
		where += " of group " + id
	}
	ctx, cancel := context.WithCancelCause(ctx)
	watched := watchFailure(ctx, st, cancel)
	refused := watchRefusal(ctx, owner.st, cfg.JobID, cancel) // a node that never joined says why
	g, err := join(ctx, cfg, id, rank, size, owner, st, where)
	cause := context.Cause(ctx)
	cancel(nil)
	<-watched
	<-refused
	if err == nil {
		return g, nil
	}
	var rep *reportedError
	if errors.As(cause, &rep) && (errors.As(err, new(*reportedError)) || !errors.Is(err, ErrConfig)) {
		// This rank's error is the fallout of the one reported.
		err = fmt.Errorf("%s: rendezvous failed: %w", where, rep)
	} else if rep = settledFailure(st, err); rep != nil {
		err = fmt.Errorf("%s: rendezvous failed: %w (here: %w)", where, rep, err)
	} else {
		recordFailure(st, setupFailure{Rank: rank, Config: errors.Is(err, ErrConfig), Reason: failureReason(err, where)})
	}
	if missing := missingRanks(st, size); missing != "" {
		err = fmt.Errorf("%w (ranks not joined: %s%s)", err, missing, notJoinedHint(err))
	}
	return nil, err
}

// join is connect's work: register, validate, connect the mesh and the
// shared-memory arena.
func join(ctx context.Context, cfg Config, id string, rank, size int, owner *storeOwner, st store.Store, where string) (*Group, error) {
	ws := []byte(strconv.Itoa(size))
	got, err := st.CompareAndSet(ctx, "world_size", nil, ws)
	if err != nil {
		return nil, fmt.Errorf("%s: register world size: %w", where, err)
	}
	if string(got) != string(ws) {
		return nil, fmt.Errorf("%w: %s: world size disagreement: this rank says %d, another rank registered %s", ErrConfig, where, size, got)
	}
	n, err := st.Add(ctx, "rank/"+strconv.Itoa(rank), 1)
	if err != nil {
		return nil, fmt.Errorf("%s: register rank: %w", where, err)
	}
	if n != 1 {
		// Whichever of the two registered second reports it: the hint
		// must not depend on which one owns the store.
		hint := ""
		switch {
		case owner.listenErr != nil && id == "":
			hint = fmt.Sprintf(" (this rank found the store port taken: %v; did two nodes get the same node rank?)", owner.listenErr)
		case id == "":
			hint = " (did two nodes get the same node rank?)"
		}
		return nil, fmt.Errorf("%w: %s: duplicate rank: another process already joined job %q as rank %d%s", ErrConfig, where, cfg.JobID, rank, hint)
	}
	if id == "" && size > 1 {
		// Subgroups run in the same processes: one check suffices.
		if err := checkBuild(ctx, cfg, st, rank, where); err != nil {
			return nil, err
		}
	}
	mesh, err := tcp.Connect(ctx, tcp.Options{
		Rank: rank, Size: size, Store: st, Token: []byte(cfg.Token), JobID: cfg.JobID + "/" + id,
		ListenHost: cfg.ListenHost, AdvertiseHost: owner.advertise,
		PortMin: cfg.PortMin, PortMax: cfg.PortMax, PortFallback: cfg.portFallback,
		SocketBuffer: cfg.SocketBuffer, Logger: cfg.Logger,
		HeartbeatTimeout: cfg.HeartbeatTimeout, TLS: cfg.tls,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: connect the data plane: %w", where, err)
	}
	key := cfg.nodeKey
	if key == "" {
		key = hostNodeKey()
	}
	topo, err := exchangeTopology(ctx, st, rank, size, key)
	if err != nil {
		mesh.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var ar *shm.Arena
	if (cfg.AllReduceAlgo == AlgoAuto || cfg.AllReduceAlgo == AlgoShm) && len(topo.nodes) == 1 {
		// Ranks on several nodes never share an arena (every rank agrees:
		// they read the same topology).
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		if ar, err = setupArena(ctx, st, rank, size, log); err != nil {
			mesh.Close()
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	if err := awaitJoined(ctx, st, rank, size); err != nil {
		if ar != nil {
			ar.Close()
		}
		mesh.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	g := newGroup(cfg, id, rank, size, mesh, st)
	g.arena = ar
	g.topo = topo
	if rank == 0 && g.hierarchical() {
		cfg.Logger.Info("distributed: hierarchical collectives", "group", id, "topology", topo.String())
	}
	return g, nil
}

// awaitJoined holds rank 0 until every rank has finished the set-up steps
// that read the store. Rank 0 serves the store: were it to return first and
// destroy the group at once, a slower rank could lose the store halfway
// through its set-up.
func awaitJoined(ctx context.Context, st store.Store, rank, size int) error {
	n, err := st.Add(ctx, "joined", 1)
	if err != nil {
		return fmt.Errorf("counting the ranks set up: %w", err)
	}
	if n == int64(size) {
		if err := st.Set(ctx, "all_joined", []byte{1}); err != nil {
			return fmt.Errorf("marking every rank set up: %w", err)
		}
	}
	if rank != 0 {
		return nil
	}
	if err := st.Wait(ctx, "all_joined"); err != nil {
		return fmt.Errorf("waiting for every rank to finish its set-up: %w", err)
	}
	return nil
}

// NewGroup makes a group of the given ranks of g (like PyTorch's
// new_group). Every rank of g must call it, with the same ranks, in the
// same order as its other NewGroup calls; ranks not in the list get
// ErrNotMember. The new group's ranks are numbered in increasing order of
// their rank in g. Destroying g destroys it too.
func (g *Group) NewGroup(ctx context.Context, ranks []int) (*Group, error) {
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	if len(ranks) == 0 || ranks[0] < 0 || ranks[len(ranks)-1] >= g.size || len(slices.Compact(slices.Clone(ranks))) != len(ranks) {
		return nil, fmt.Errorf("%w: new group ranks %v: want distinct ranks in 0..%d", ErrConfig, ranks, g.size-1)
	}
	root := g
	for root.parent != nil {
		root = root.parent
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrGroupClosed
	}
	id := g.id + "/" + strconv.Itoa(g.nsub)
	g.nsub++
	g.mu.Unlock()
	me := slices.Index(ranks, g.rank)
	if me < 0 {
		return nil, ErrNotMember
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ConnectTimeout)
	defer cancel()
	sub, err := connect(ctx, g.cfg, id, me, len(ranks), root.owner)
	if err != nil {
		return nil, err
	}
	sub.parent = g
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		sub.Destroy()
		return nil, ErrGroupClosed
	}
	g.children = append(g.children, sub)
	return sub, nil
}
