// Package pmi is a client of the PMI-1 wire protocol, the key-value
// service that MPICH's and Intel MPI's Hydra launcher (mpiexec) offers
// the processes it starts: line-oriented "cmd=... key=value" messages
// over the socket inherited as PMI_FD, or dialed at PMI_PORT. It lets a
// process find the others' addresses without linking an MPI library.
package pmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrPMI is what the errors of the launcher's answers match.
var ErrPMI = errors.New("pmi")

// Client speaks PMI-1 with the launcher.
type Client struct {
	conn io.ReadWriteCloser
	rd   *bufio.Reader
	// deadline sets the connection's deadline where it has one.
	deadline func(time.Time) error
	kvs      string
	// Rank and Size are this process's rank and the number of processes,
	// as the launcher told them (PMI_RANK and PMI_SIZE with PMI_FD).
	Rank, Size int
}

// Dial connects to the launcher named by the environment (PMI_FD, else
// PMI_PORT with PMI_ID) and runs PMI's initialisation handshake, bounded
// by ctx.
func Dial(ctx context.Context, lookup func(string) (string, bool)) (*Client, error) {
	c := &Client{}
	if fdStr, ok := lookup("PMI_FD"); ok {
		fd, err := strconv.Atoi(fdStr)
		if err != nil || fd < 0 {
			return nil, fmt.Errorf("%w: PMI_FD=%q is not a file descriptor", ErrPMI, fdStr)
		}
		f := os.NewFile(uintptr(fd), "PMI_FD")
		if f == nil {
			return nil, fmt.Errorf("%w: PMI_FD=%d is not open", ErrPMI, fd)
		}
		// A socket works best as a net.Conn: deadlines interrupt reads.
		if nc, err := net.FileConn(f); err == nil {
			f.Close() // FileConn dup'ed it
			c.conn, c.deadline = nc, nc.SetDeadline
		} else {
			c.conn, c.deadline = f, f.SetDeadline
		}
	} else if addr, ok := lookup("PMI_PORT"); ok {
		id, ok := lookup("PMI_ID")
		if !ok {
			return nil, fmt.Errorf("%w: PMI_PORT=%s is set without PMI_ID", ErrPMI, addr)
		}
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%w: connect to PMI_PORT=%s: %w", ErrPMI, addr, err)
		}
		c.conn, c.deadline = nc, nc.SetDeadline
		c.rd = bufio.NewReader(c.conn)
		if err := c.initAck(ctx, id); err != nil {
			c.conn.Close()
			return nil, err
		}
	} else {
		return nil, fmt.Errorf("%w: neither PMI_FD nor PMI_PORT is set", ErrPMI)
	}
	if c.rd == nil {
		c.rd = bufio.NewReader(c.conn)
		// With PMI_FD the launcher tells rank and size in the environment.
		c.Rank, _ = strconv.Atoi(getenv(lookup, "PMI_RANK"))
		c.Size, _ = strconv.Atoi(getenv(lookup, "PMI_SIZE"))
	}
	if err := c.init(ctx); err != nil {
		c.conn.Close()
		return nil, err
	}
	return c, nil
}

// NewClient runs the handshake over an established connection (tests, or
// a socket obtained otherwise).
func NewClient(ctx context.Context, conn net.Conn) (*Client, error) {
	c := &Client{conn: conn, rd: bufio.NewReader(conn), deadline: conn.SetDeadline}
	if err := c.init(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// initAck is PMI_PORT's extra handshake: the launcher learns which of its
// processes connected, and tells its rank and size.
func (c *Client) initAck(ctx context.Context, id string) error {
	if _, err := c.call(ctx, "initack", "initack", "pmiid", id); err != nil {
		return err
	}
	for range 3 { // cmd=set size=N, cmd=set rank=R, cmd=set debug=D
		m, err := c.read(ctx)
		if err != nil {
			return err
		}
		if m["cmd"] != "set" {
			return fmt.Errorf("%w: after initack want cmd=set, got %v", ErrPMI, m)
		}
		if v, ok := m["rank"]; ok {
			c.Rank, _ = strconv.Atoi(v)
		}
		if v, ok := m["size"]; ok {
			c.Size, _ = strconv.Atoi(v)
		}
	}
	return nil
}

func (c *Client) init(ctx context.Context) error {
	m, err := c.call(ctx, "init", "response_to_init", "pmi_version", "1", "pmi_subversion", "1")
	if err != nil {
		return err
	}
	if m["pmi_version"] != "1" {
		return fmt.Errorf("%w: the launcher speaks PMI version %s, want 1", ErrPMI, m["pmi_version"])
	}
	if m, err = c.call(ctx, "get_my_kvsname", "my_kvsname"); err != nil {
		return err
	}
	c.kvs = m["kvsname"]
	if c.kvs == "" {
		return fmt.Errorf("%w: the launcher named no key-value space", ErrPMI)
	}
	return nil
}

// KVSName is the job's key-value space: unique to the job, so it also
// serves as its id.
func (c *Client) KVSName() string { return c.kvs }

// Put stores key=value in the job's key-value space; others see it after
// the next Barrier. Neither may hold spaces or '='.
func (c *Client) Put(ctx context.Context, key, value string) error {
	if strings.ContainsAny(key+value, " =\n") || key == "" {
		return fmt.Errorf("%w: key %q and value %q must be non-empty and hold no space, '=' or newline", ErrPMI, key, value)
	}
	_, err := c.call(ctx, "put", "put_result", "kvsname", c.kvs, "key", key, "value", value)
	return err
}

// Barrier waits until every process of the job has entered it.
func (c *Client) Barrier(ctx context.Context) error {
	_, err := c.call(ctx, "barrier_in", "barrier_out")
	return err
}

// Get reads key from the job's key-value space.
func (c *Client) Get(ctx context.Context, key string) (string, error) {
	m, err := c.call(ctx, "get", "get_result", "kvsname", c.kvs, "key", key)
	if err != nil {
		return "", err
	}
	return m["value"], nil
}

// Close tells the launcher this process is done with PMI (finalize) and
// closes the connection.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.call(ctx, "finalize", "finalize_ack")
	if cerr := c.conn.Close(); err == nil {
		err = cerr
	}
	return err
}

// call sends one command and reads its answer, which must be resp with
// rc=0 (when the answer has an rc).
func (c *Client) call(ctx context.Context, cmd, resp string, kv ...string) (map[string]string, error) {
	var b strings.Builder
	b.WriteString("cmd=" + cmd)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(" " + kv[i] + "=" + kv[i+1])
	}
	b.WriteString("\n")
	if err := c.bound(ctx); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c.conn, b.String()); err != nil {
		return nil, fmt.Errorf("%w: send %s: %w", ErrPMI, cmd, err)
	}
	m, err := c.read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if m["cmd"] != resp {
		return nil, fmt.Errorf("%w: %s: want cmd=%s, got %v", ErrPMI, cmd, resp, m)
	}
	if rc, ok := m["rc"]; ok && rc != "0" {
		return nil, fmt.Errorf("%w: %s failed: rc=%s %s", ErrPMI, cmd, rc, m["msg"])
	}
	return m, nil
}

// bound applies ctx's deadline to the connection.
func (c *Client) bound(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.deadline == nil {
		return nil
	}
	d, _ := ctx.Deadline() // zero: none
	_ = c.deadline(d)      // a pipe without deadlines just blocks
	return nil
}

// read reads one answer line into its key=value pairs.
func (c *Client) read(ctx context.Context) (map[string]string, error) {
	if err := c.bound(ctx); err != nil {
		return nil, err
	}
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("%w: read the launcher's answer: %w", ErrPMI, err)
	}
	return ParseLine(line), nil
}

// ParseLine splits a PMI-1 line ("cmd=get_result rc=0 value=x") into its
// key=value pairs.
func ParseLine(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func getenv(lookup func(string) (string, bool), name string) string {
	v, _ := lookup(name)
	return v
}
