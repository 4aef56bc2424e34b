package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/data/shards"
	"github.com/gotrain/gotrain/launch/hosts"
	"github.com/gotrain/gotrain/launch/ssh"
)

func init() { dataSubcommands = append(dataSubcommands, newDataDistributeCmd) }

// distributeFlags are `gotrain data distribute`'s flags.
type distributeFlags struct {
	hosts      string
	hostfile   string
	sshOptions []string
	replicas   int
	remoteDir  string
}

// newDataDistributeCmd is `gotrain data distribute`.
func newDataDistributeCmd() *cobra.Command {
	var o distributeFlags
	cmd := &cobra.Command{
		Use:   "distribute DIR --hosts HOST[:SLOTS],... [--replicas K] [--remote-dir PATH]",
		Short: "Copy a prepared dataset's shards to the hosts over ssh, each shard to K of them",
		Long: `Distribute places the prepared dataset in DIR on machines without a shared
file system, over ssh as gotrain run --hosts reaches them: every host gets
index.json, and each split's shards are dealt round-robin so that each is
on --replicas hosts (shard k of a split goes to hosts k, k+1, … modulo the
number of hosts), except the val split, which every rank evaluates, so
every host gets all of it. Each file is streamed to a temporary file, its sha256
is checked on the host against index.json, and it is renamed into place;
index.json is written last. A file already there with the right sha256 is
left as it is, so distribute can be run again after a failure. Progress
goes to stderr.

A job then reads the dataset from the same directory on every host
(gotrain train gpt --data PATH --hosts ...): each rank reads the shards
its host holds.`,
		Example: `  gotrain data distribute ./tokens --hosts node0,node1
  gotrain data distribute ./tokens --hosts node0:2,node1:2 --replicas 2 --remote-dir /scratch/tokens`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("data distribute: want one DIR argument (usage: gotrain data distribute DIR --hosts HOST,...), got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			hs, err := o.check()
			if err != nil {
				return err
			}
			dir := args[0]
			idx, err := shards.ReadIndex(dir)
			if err != nil {
				return err
			}
			remote := o.remoteDir
			if remote == "" {
				if remote, err = filepath.Abs(dir); err != nil {
					return err
				}
			}
			return distribute(cmd.Context(), cmd.ErrOrStderr(), ssh.Client{Options: o.sshOptions}, dir, idx, hs, o.replicas, remote)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.hosts, "hosts", "", "the machines, as gotrain run takes them: HOST[:SLOTS],... (slots are ignored)")
	f.StringVar(&o.hostfile, "hostfile", "", `the machines listed in this file, one "HOST slots=N" a line, as --hosts`)
	f.StringArrayVar(&o.sshOptions, "ssh-option", nil, "an ssh setting KEY=VALUE passed as ssh -o (repeatable)")
	f.IntVar(&o.replicas, "replicas", 1, "on how many hosts to place each shard")
	f.StringVar(&o.remoteDir, "remote-dir", "", "the directory on the hosts (~/ for the remote home; default: DIR's absolute path)")
	return cmd
}

// check returns the hosts, or a usage error naming the bad flag.
func (o distributeFlags) check() ([]hosts.Host, error) {
	var hs []hosts.Host
	var err error
	switch {
	case o.hosts != "" && o.hostfile != "":
		return nil, flagNeeds("hosts", "give --hosts or --hostfile, not both")
	case o.hosts != "":
		if hs, err = hosts.Parse(o.hosts); err != nil {
			return nil, badFlag("hosts", o.hosts, hostsProblem(err))
		}
	case o.hostfile != "":
		if hs, err = hosts.ReadFile(o.hostfile); err != nil {
			return nil, badFlag("hostfile", o.hostfile, hostsProblem(err))
		}
	default:
		return nil, usagef("data distribute: --hosts (or --hostfile) is required: the machines to place the shards on")
	}
	for _, opt := range o.sshOptions {
		if k, _, ok := strings.Cut(opt, "="); !ok || k == "" || strings.ContainsAny(opt, "\n") {
			return nil, badFlag("ssh-option", opt, "must be KEY=VALUE, as ssh -o takes it (e.g. Port=2222)")
		}
	}
	if o.replicas < 1 || o.replicas > len(hs) {
		return nil, badFlag("replicas", o.replicas, fmt.Sprintf("must be from 1 to the number of hosts, %d", len(hs)))
	}
	if o.remoteDir != "" && !strings.HasPrefix(o.remoteDir, "/") && o.remoteDir != "~" && !strings.HasPrefix(o.remoteDir, "~/") {
		return nil, badFlag("remote-dir", o.remoteDir, "must be an absolute path or start with ~/ (the remote home)")
	}
	return hs, nil
}

// placement deals idx's shards to nHosts hosts: within each split, shard
// k goes to hosts k, k+1, …, k+replicas-1 modulo nHosts, except the val
// split's, which every rank of a job evaluates, and so every host gets.
// It returns each host's shards, in index order.
func placement(idx *shards.Index, nHosts, replicas int) [][]shards.Shard {
	out := make([][]shards.Shard, nHosts)
	k := map[string]int{}
	for _, s := range idx.Shards {
		n := replicas
		if s.Split == shards.Val {
			n = nHosts
		}
		for j := range n {
			h := (k[s.Split] + j) % nHosts
			out[h] = append(out[h], s)
		}
		k[s.Split]++
	}
	return out
}

// distribute copies dir's index and shards to hs by placement.
func distribute(ctx context.Context, progress io.Writer, client ssh.Client, dir string, idx *shards.Index, hs []hosts.Host, replicas int, remote string) error {
	indexBytes, err := os.ReadFile(filepath.Join(dir, shards.IndexFile))
	if err != nil {
		return fmt.Errorf("data distribute: %w", err)
	}
	indexSum := sha256.Sum256(indexBytes)
	c, end, err := client.Multiplex()
	if err != nil {
		return fmt.Errorf("data distribute: %w", err)
	}
	defer end()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	places := placement(idx, len(hs), replicas)
	out := &lockedWriter{w: progress}
	stats := make([]copyStats, len(hs))
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		wg.Go(func() {
			d := hostCopy{client: c, host: h.Name, dir: dir, remote: remote, width: shards.Width(idx.DType), out: out}
			stats[i], errs[i] = d.run(ctx, places[i], indexBytes, hex.EncodeToString(indexSum[:]))
			if errs[i] != nil {
				cancel() // the first failure stops the other hosts
			}
		})
	}
	wg.Wait()
	// The first host's own failure, not a host stopped because of it.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var total copyStats
	for _, s := range stats {
		total.sent += s.sent
		total.bytes += s.bytes
		total.kept += s.kept
	}
	fmt.Fprintf(out, "data distribute: done: %d shards on %d hosts, each on %d (val on all): %d copied (%s), %d already in place; index.json in %s on every host\n",
		len(idx.Shards), len(hs), replicas, total.sent, byteSize(total.bytes), total.kept, remote)
	return nil
}

// copyStats counts what one host received.
type copyStats struct {
	sent, kept int
	bytes      int64
}

// hostCopy copies files to one host.
type hostCopy struct {
	client ssh.Client
	host   string
	dir    string // local
	remote string // on the host
	width  int    // bytes per token
	out    io.Writer
}

// run places files and then the index on the host.
func (d hostCopy) run(ctx context.Context, files []shards.Shard, index []byte, indexSum string) (copyStats, error) {
	var st copyStats
	have, err := d.present(ctx, files)
	if err != nil {
		return st, err
	}
	for _, s := range files {
		if have[s.File] == strings.ToLower(s.SHA256) {
			st.kept++
			fmt.Fprintf(d.out, "data distribute: %s: %s already in place\n", d.host, s.File)
			continue
		}
		n, err := d.sendFile(ctx, s.File, s.SHA256)
		if err != nil {
			return st, err
		}
		st.sent++
		st.bytes += n
		fmt.Fprintf(d.out, "data distribute: %s: %s sent (%s)\n", d.host, s.File, byteSize(n))
	}
	// The index last: a host with an index holds its shards.
	if _, err := d.send(ctx, shards.IndexFile, indexSum, bytes.NewReader(index)); err != nil {
		return st, err
	}
	return st, nil
}

// remoteShell is the shell prelude of every command on a host: d, the
// directory, and sum, the sha256 of a file or stdin in hex.
func (d hostCopy) remoteShell() string {
	dir := ssh.Quote(d.remote)
	switch {
	case d.remote == "~":
		dir = `"$HOME"`
	case strings.HasPrefix(d.remote, "~/"):
		dir = `"$HOME"/` + ssh.Quote(strings.TrimPrefix(d.remote, "~/"))
	}
	return "set -e\nd=" + dir + "\n" +
		`sum() { if command -v sha256sum >/dev/null 2>&1; then sha256sum "$@"; else shasum -a 256 "$@"; fi | cut -d' ' -f1; }` + "\n"
}

// present returns the sha256 of those of files the host holds with the
// right size.
func (d hostCopy) present(ctx context.Context, files []shards.Shard) (map[string]string, error) {
	var script strings.Builder
	script.WriteString(d.remoteShell())
	script.WriteString(`mkdir -p "$d"` + "\n" + `cd "$d"` + "\n")
	script.WriteString(`check() { if [ -f "$1" ] && [ "$(wc -c < "$1" | tr -d ' ')" = "$2" ]; then echo "$1 $(sum "$1")"; fi; }` + "\n")
	for _, s := range files {
		fmt.Fprintf(&script, "check %s %d\n", ssh.Quote(s.File), s.Tokens*int64(d.width))
	}
	out, err := d.client.Run(ctx, d.host, nil, "sh", "-c", script.String())
	if err != nil {
		return nil, fmt.Errorf("data distribute: %s: listing %s: %w", d.host, d.remote, err)
	}
	have := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if name, sum, ok := strings.Cut(sc.Text(), " "); ok {
			have[name] = strings.TrimSpace(sum)
		}
	}
	return have, nil
}

// sendFile streams the local shard name to the host, checking on the way
// that the local file is the one index.json describes.
func (d hostCopy) sendFile(ctx context.Context, name, want string) (int64, error) {
	path := filepath.Join(d.dir, name)
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("data distribute: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := d.send(ctx, name, want, io.TeeReader(f, h))
	if got := hex.EncodeToString(h.Sum(nil)); err != nil && !strings.EqualFold(got, want) {
		// The host refused what this machine holds: say so, not the host.
		return n, fmt.Errorf("data distribute: %s does not match its sha256 in index.json (%s, want %s): prepare the dataset again", path, got, want)
	}
	return n, err
}

// send streams r to the host as remote/name: to a temporary file, whose
// sha256 must be want, then renamed into place.
func (d hostCopy) send(ctx context.Context, name, want string, r io.Reader) (int64, error) {
	script := d.remoteShell() +
		"f=" + ssh.Quote(name) + "\nwant=" + ssh.Quote(strings.ToLower(want)) + "\n" +
		`mkdir -p "$d"` + "\n" +
		`tmp="$d/.$f.tmp.$$"` + "\n" +
		`trap 'rm -f "$tmp"' EXIT` + "\n" +
		`trap 'rm -f "$tmp"; exit 1' HUP INT TERM` + "\n" +
		`cat > "$tmp"` + "\n" +
		`got=$(sum < "$tmp")` + "\n" +
		`if [ "$got" != "$want" ]; then echo "received $f with sha256 $got, want $want" >&2; exit 3; fi` + "\n" +
		`mv -f "$tmp" "$d/$f"` + "\n" +
		`trap - EXIT` + "\n"
	cr := &countingReader{r: r}
	if _, err := d.client.Run(ctx, d.host, cr, "sh", "-c", script); err != nil {
		return cr.n, fmt.Errorf("data distribute: %s: sending %s to %s: %w", d.host, name, d.remote, err)
	}
	return cr.n, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// lockedWriter serialises whole writes of the hosts' progress lines.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// byteSize is n bytes for people.
func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
