package distributed

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/internal/shm"
	"github.com/gotrain/gotrain/internal/transport/tcp"
)

// Init joins the process group described by cfg: it reaches the store
// (serving it on rank 0 for env:// and tcp://), checks that every rank
// agrees on the world size and that no rank is taken twice, and connects
// the full mesh of authenticated data connections. It returns once every
// rank is connected, or an error naming what is wrong after at most
// cfg.ConnectTimeout.
func Init(ctx context.Context, cfg Config) (*Group, error) {
	cfg, env, err := cfg.resolve()
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
	if err != nil {
		owner.close()
		return nil, err
	}
	g.owner = owner
	return g, nil
}

// storeOwner holds the default group's store client and, on the rank that
// serves it, the server.
type storeOwner struct {
	st        store.Store
	srv       *store.Server
	prefix    string // "gotrain/<job>/<restart>/"
	advertise string // host peers dial for this rank's data plane
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
		host, port := env.masterHost, env.masterPort
		if host == "" || port == "" {
			return nil, fmt.Errorf("%w: env:// needs MASTER_ADDR and MASTER_PORT (got %q and %q)", ErrConfig, host, port)
		}
		addr = net.JoinHostPort(host, port)
	case "tcp":
		if u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("%w: malformed init method %q: want tcp://host:port", ErrConfig, method)
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
		o.advertise = advertiseHost(cfg.ListenHost, "")
		return o, nil
	default:
		return nil, fmt.Errorf("%w: unknown init method scheme %q in %q: want env://, tcp://host:port or file:///path", ErrConfig, u.Scheme, method)
	}
	host, port, err := net.SplitHostPort(addr)
	if p, perr := strconv.Atoi(port); err != nil || perr != nil || p <= 0 || p > 65535 {
		return nil, fmt.Errorf("%w: bad master address %q", ErrConfig, addr)
	}
	token := []byte(cfg.Token)
	if cfg.Rank == 0 && !cfg.AgentStore {
		srv, err := store.Listen(net.JoinHostPort("", port), token)
		if err != nil {
			return nil, fmt.Errorf("distributed: rank 0: serve the store on port %s (MASTER_PORT): %w", port, err)
		}
		o.srv = srv
	}
	st, err := store.Dial(ctx, addr, token)
	if err != nil {
		if o.srv != nil {
			o.srv.Close()
		}
		return nil, fmt.Errorf("distributed: rank %d: connect to the store at %s within %v: %w", cfg.Rank, addr, cfg.ConnectTimeout, err)
	}
	o.st = st
	o.advertise = advertiseHost(cfg.ListenHost, host)
	return o, nil
}

// advertiseHost picks the host peers should dial: the listen host if it
// is a specific address, else the local address of the route to the
// master (no packet is sent), else loopback.
func advertiseHost(listen, master string) string {
	if ip := net.ParseIP(listen); listen != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	if master != "" {
		if c, err := net.Dial("udp", net.JoinHostPort(master, "9")); err == nil {
			defer c.Close()
			return c.LocalAddr().(*net.UDPAddr).IP.String()
		}
	}
	return "127.0.0.1"
}

// connect registers this rank in the group's namespace, validates the
// rank and world size against the other ranks', and connects the mesh.
func connect(ctx context.Context, cfg Config, id string, rank, size int, owner *storeOwner) (*Group, error) {
	st := store.Prefix(owner.st, owner.prefix+"group"+id+"/")
	where := fmt.Sprintf("distributed: rank %d", rank)
	if id != "" {
		where += " of group " + id
	}
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
		return nil, fmt.Errorf("%w: %s: duplicate rank: another process already joined job %q as rank %d", ErrConfig, where, cfg.JobID, rank)
	}
	mesh, err := tcp.Connect(ctx, tcp.Options{
		Rank: rank, Size: size, Store: st, Token: []byte(cfg.Token), JobID: cfg.JobID + "/" + id,
		ListenHost: cfg.ListenHost, AdvertiseHost: owner.advertise,
		PortMin: cfg.PortMin, PortMax: cfg.PortMax, SocketBuffer: cfg.SocketBuffer, Logger: cfg.Logger,
		HeartbeatTimeout: cfg.HeartbeatTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: connect the data plane: %w", where, err)
	}
	var ar *shm.Arena
	if cfg.AllReduceAlgo == AlgoAuto || cfg.AllReduceAlgo == AlgoShm {
		log := cfg.Logger
		if log == nil {
			log = slog.Default()
		}
		if ar, err = setupArena(ctx, st, rank, size, log); err != nil {
			mesh.Close()
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	g := newGroup(cfg, id, rank, size, mesh, st)
	g.arena = ar
	return g, nil
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
