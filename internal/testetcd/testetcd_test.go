package testetcd

import (
	"net"
	"net/http"
	"testing"

	"github.com/gotrain/gotrain/internal/testnet"
)

// TestStartAgainOnTakenPort: the first client port Start picks is held by
// another listener (one that answers HTTP, as a stray server would);
// etcd exits, and Start starts it again on a new port that etcd answers.
func TestStartAgainOnTakenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(held)
	t.Cleanup(func() { srv.Close() })

	picks := 0
	freeAddr = func(tb testing.TB) string {
		picks++
		if picks == 1 {
			return held.Addr().String()
		}
		return testnet.FreeAddr(tb)
	}
	t.Cleanup(func() { freeAddr = testnet.FreeAddr })

	client := Start(t)
	if client == held.Addr().String() {
		t.Fatalf("Start returned the port another server holds: %s", client)
	}
	if picks < 4 {
		t.Fatalf("Start picked %d ports; want a second start after the clash", picks)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + client + "/version")
	if err != nil {
		t.Fatalf("etcd at %s: %v", client, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd at %s /version: %s", client, resp.Status)
	}
}
