package observe

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gotrain/gotrain/event"
	"github.com/gotrain/gotrain/internal/testbrowser"
)

func replicaLine(c event.ReplicaChange) []byte {
	data, _ := json.Marshal(c)
	return fmt.Appendf(nil, `{"kind":%q,"rank":0,"data":%s}`, event.KindReplicas, data)
}

// The hub keeps a fault-tolerant job's replica count and every change,
// and bumps the version the dashboard polls.
func TestHubKeepsReplicaChanges(t *testing.T) {
	h, err := New(Options{RunID: "ft", Ranks: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if st := h.Snapshot(); st.Replicas != nil {
		t.Fatalf("replicas %+v before any change", st.Replicas)
	}
	v := h.Snapshot().Version
	h.Event(0, replicaLine(event.ReplicaChange{Change: event.ReplicaLeft, Replica: "vm-001", Replicas: 2, Of: 3, Step: 40}))
	h.Event(0, []byte(`{"kind":"replicas","data":{}}`)) // no change: ignored
	h.Event(2, replicaLine(event.ReplicaChange{Change: event.ReplicaHealed, Replica: "vm-001", Replicas: 3, Of: 3, Step: 60, Source: "vm-000"}))
	st := h.Snapshot()
	if st.Replicas == nil || st.Replicas.Live != 3 || st.Replicas.Of != 3 || len(st.Replicas.Changes) != 2 ||
		st.Replicas.Changes[0].Change != "left" || st.Replicas.Changes[1].Source != "vm-000" {
		t.Fatalf("replicas %+v: want 3/3 after vm-001 left and healed from vm-000", st.Replicas)
	}
	if st.Version != v+2 {
		t.Errorf("version %d after two changes from %d", st.Version, v)
	}
	for i := range maxReplicaChanges + 5 {
		h.Event(0, replicaLine(event.ReplicaChange{Change: event.ReplicaJoined, Replica: "x", Replicas: 3, Of: 3, Step: int64(100 + i)}))
	}
	if n := len(h.Snapshot().Replicas.Changes); n != maxReplicaChanges {
		t.Fatalf("%d changes kept, want the last %d", n, maxReplicaChanges)
	}
}

// The dashboard shows the replica count and the changes, newest first.
func TestDashboardShowsReplicas(t *testing.T) {
	ctx := testbrowser.Context(t, 60*time.Second)
	h, err := New(Options{RunID: "ft", Node: "0", Ranks: 3, DashboardAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Event(0, replicaLine(event.ReplicaChange{Change: event.ReplicaLeft, Replica: "vm-001", Replicas: 2, Of: 3, Step: 40}))
	h.Event(0, replicaLine(event.ReplicaChange{Change: event.ReplicaHealed, Replica: "vm-001", Replicas: 3, Of: 3, Step: 60, Source: "vm-000"}))
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+h.Addr("dashboard")+"/"), chromedp.WaitReady("#replica-changes li:nth-child(2)")); err != nil {
		t.Fatalf("the dashboard shows no two replica changes: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("replica-count").textContent + "|" +
		[...document.querySelectorAll("#replica-changes li")].map(li => li.className + ":" + li.textContent).join("|")`))
	if err != nil {
		t.Fatal(err)
	}
	want := "replicas 3/3|replica-healed:step 60: vm-001 healed from vm-000 (3/3)|replica-left:step 40: vm-001 left (2/3)"
	if strings.TrimSpace(got) != want {
		t.Fatalf("the dashboard shows %q, want %q", got, want)
	}
}
