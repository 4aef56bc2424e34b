package clusterenv

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/internal/pmi"
)

// fakeHydra serves PMI-1 over PMI_PORT to size processes as Hydra does:
// initack with the process's id, then init, get_my_kvsname, put,
// barrier_in (answered when all have entered), get and finalize.
type fakeHydra struct {
	l       net.Listener
	size    int
	mu      sync.Mutex
	kvs     map[string]string
	waiting []net.Conn
	failPut bool
}

func startFakeHydra(t *testing.T, size int) *fakeHydra {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHydra{l: l, size: size, kvs: map[string]string{}}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go h.serve(c)
		}
	}()
	return h
}

func (h *fakeHydra) serve(c net.Conn) {
	defer c.Close()
	rd := bufio.NewReader(c)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return
		}
		m := pmi.ParseLine(line)
		var resp string
		switch m["cmd"] {
		case "initack":
			id, _ := strconv.Atoi(m["pmiid"])
			resp = fmt.Sprintf("cmd=initack\ncmd=set size=%d\ncmd=set rank=%d\ncmd=set debug=0\n", h.size, id)
		case "init":
			resp = "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
		case "get_my_kvsname":
			resp = "cmd=my_kvsname kvsname=kvs_42_0\n"
		case "put":
			h.mu.Lock()
			h.kvs[m["key"]] = m["value"]
			h.mu.Unlock()
			resp = "cmd=put_result rc=0\n"
			if h.failPut {
				resp = "cmd=put_result rc=1 msg=duplicate_key\n"
			}
		case "barrier_in":
			h.mu.Lock()
			h.waiting = append(h.waiting, c)
			if len(h.waiting) == h.size {
				for _, w := range h.waiting {
					fmt.Fprint(w, "cmd=barrier_out\n")
				}
				h.waiting = nil
			}
			h.mu.Unlock()
			continue
		case "get":
			h.mu.Lock()
			v, ok := h.kvs[m["key"]]
			h.mu.Unlock()
			resp = "cmd=get_result rc=0 value=" + v + "\n"
			if !ok {
				resp = "cmd=get_result rc=-1 msg=key_not_found\n"
			}
		case "finalize":
			resp = "cmd=finalize_ack\n"
		default:
			resp = "cmd=unknown\n"
		}
		fmt.Fprint(c, resp)
	}
}

func TestRendezvousPMIPort(t *testing.T) {
	const size = 3
	h := startFakeHydra(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	envs := make([]Env, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			lookup := envOf("PMI_RANK="+strconv.Itoa(r), "PMI_SIZE=3", "PMI_PORT="+h.l.Addr().String(), "PMI_ID="+strconv.Itoa(r))
			e, err := Detect(lookup)
			if err == nil {
				err = Rendezvous(ctx, &e, lookup)
			}
			envs[r], errs[r] = e, err
		})
	}
	wg.Wait()
	for r, e := range envs {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if e.MasterAddr != "127.0.0.1" || e.MasterPort != envs[0].MasterPort || e.JobID != "pmi-kvs_42_0" {
			t.Errorf("rank %d: master %s:%s job %s", r, e.MasterAddr, e.MasterPort, e.JobID)
		}
	}
	if p, _ := strconv.Atoi(envs[0].MasterPort); p < JobPortBase || p >= JobPortBase+JobPortSpan+100 {
		t.Errorf("port %d: want one derived from the key-value space's name", p)
	}
}

func TestRendezvousPMIErrors(t *testing.T) {
	h := startFakeHydra(t, 1)
	h.failPut = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lookup := envOf("PMI_RANK=0", "PMI_SIZE=1", "PMI_PORT="+h.l.Addr().String(), "PMI_ID=0")
	e := Env{Engine: MPICH, WorldSize: 1, LocalWorldSize: 1, PMI: true}
	err := Rendezvous(ctx, &e, lookup)
	if err == nil || !strings.Contains(err.Error(), "rc=1 duplicate_key") {
		t.Errorf("a refused put: %v", err)
	}
	// A launcher that never answers: the context bounds the wait.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	silent := make(chan struct{}) // the launcher says nothing until the test is done with it
	defer close(silent)
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			<-silent
		}
	}()
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	start := time.Now()
	err = Rendezvous(short, &e, envOf("PMI_PORT="+l.Addr().String(), "PMI_ID=0"))
	if err == nil || time.Since(start) > 1500*time.Millisecond {
		t.Errorf("a silent launcher: %v after %v", err, time.Since(start))
	}
	// Rank and size the launcher tells must match the environment's.
	h2 := startFakeHydra(t, 2)
	e = Env{Engine: MPICH, Rank: 1, WorldSize: 3, LocalWorldSize: 3, PMI: true}
	err = Rendezvous(ctx, &e, envOf("PMI_PORT="+h2.l.Addr().String(), "PMI_ID=1"))
	if err == nil || !strings.Contains(err.Error(), "says rank 1 of 2, the environment rank 1 of 3") {
		t.Errorf("a size that disagrees: %v", err)
	}
}

func TestRank0Host(t *testing.T) {
	multi := Env{Engine: MPICH, WorldSize: 4, LocalWorldSize: 2}
	for _, tc := range []struct {
		e    Env
		env  []string
		want string
	}{
		{Env{Engine: MPICH, WorldSize: 2, LocalWorldSize: 2}, []string{"MPIR_CVAR_CH3_INTERFACE_HOSTNAME=n1"}, "127.0.0.1"},
		{multi, []string{"MPIR_CVAR_CH3_INTERFACE_HOSTNAME=n1"}, "n1"},
		{multi, []string{"MPIR_CVAR_CH3_INTERFACE_HOSTNAME=n1", "GOTRAIN_LISTEN_HOST=10.0.0.5"}, "10.0.0.5"},
	} {
		got, err := rank0Host(tc.e, envOf(tc.env...))
		if err != nil || got != tc.want {
			t.Errorf("rank0Host(%+v, %v) = %q, %v; want %q", tc.e, tc.env, got, err, tc.want)
		}
	}
	host, _ := os.Hostname()
	if got, err := rank0Host(multi, envOf()); err != nil || got != host {
		t.Errorf("rank0Host without hints = %q, %v; want the host name %q", got, err, host)
	}
}
