package event

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestRowNonFinite writes a row whose loss, rate and throughput are not
// finite with null in their place, keeping the field order, and reads it
// back with NaN there.
func TestRowNonFinite(t *testing.T) {
	row := Row{Rank: 1, Epoch: 1, Step: 7, Steps: 1, Loss: math.NaN(), LR: math.Inf(1), Samples: 64, Unit: "tokens",
		SamplesPerSec: math.Inf(-1), StepMS: 2.5, BytesSent: map[string]int64{"0": 10}}
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	want := `{"time":0,"start":0,"rank":1,"restart":0,"epoch":1,"step":7,"steps":1,"loss":null,"lr":null,"samples":64,"unit":"tokens","samples_per_s":null,"step_ms":2.5,`
	if !strings.HasPrefix(string(b), want) || !strings.HasSuffix(string(b), `"bytes_sent":{"0":10}}`) {
		t.Fatalf("Marshal = %s\nwant it to start %s", b, want)
	}
	var got Row
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("Unmarshal(%s): %v", b, err)
	}
	if !math.IsNaN(got.Loss) || !math.IsNaN(got.LR) || !math.IsNaN(got.SamplesPerSec) {
		t.Errorf("read back loss %v lr %v samples/s %v, want NaN for each", got.Loss, got.LR, got.SamplesPerSec)
	}
	if got.StepMS != 2.5 || got.Step != 7 || got.Unit != "tokens" || got.BytesSent["0"] != 10 {
		t.Errorf("read back %+v: the finite fields changed", got)
	}
}

// TestRowFinite is the standard encoding, byte for byte, when every
// number is finite; a row without a unit leaves it out.
func TestRowFinite(t *testing.T) {
	row := Row{Rank: 0, Step: 3, Steps: 1, Loss: 2.25, LR: 0.01, Samples: 64, SamplesPerSec: 1000}
	type plain Row
	want, err := json.Marshal(plain(row))
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) || strings.Contains(string(got), "unit") {
		t.Errorf("Marshal = %s, want %s", got, want)
	}
	var back Row
	if err := json.Unmarshal(got, &back); err != nil || back.Loss != 2.25 || back.SamplesPerSec != 1000 {
		t.Errorf("Unmarshal(%s) = %+v, %v", got, back, err)
	}
}

// TestEventNonFinite tells a NaN loss (null) from no loss (absent), and
// writes a NaN metric as null.
func TestEventNonFinite(t *testing.T) {
	nan := math.NaN()
	ev := Event{Kind: KindDone, Rank: 0, Epoch: 1, Step: 20, Loss: &nan, Metrics: map[string]float64{"test_acc": 0.5, "val_loss": math.Inf(1)}}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	s := string(b)
	if KindOf(b) != KindDone || !strings.Contains(s, `"loss":null`) || !strings.Contains(s, `"val_loss":null`) || !strings.Contains(s, `"test_acc":0.5`) {
		t.Fatalf("Marshal = %s", s)
	}
	var got Event
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("Unmarshal(%s): %v", s, err)
	}
	if got.Loss == nil || !math.IsNaN(*got.Loss) || !math.IsNaN(got.Metrics["val_loss"]) || got.Metrics["test_acc"] != 0.5 || got.Step != 20 {
		t.Fatalf("read back %+v (loss %v)", got, got.Loss)
	}
	var none Event
	if err := json.Unmarshal([]byte(`{"kind":"step","rank":1,"epoch":1,"step":2,"data":null}`), &none); err != nil || none.Loss != nil {
		t.Fatalf("an event without a loss read as loss %v, err %v", none.Loss, err)
	}
}

// TestFloat is null for NaN and ±Inf, and reads null as NaN.
func TestFloat(t *testing.T) {
	b, err := json.Marshal([]Float{1.5, Float(math.NaN()), Float(math.Inf(1)), Float(math.Inf(-1)), 0})
	if err != nil || string(b) != "[1.5,null,null,null,0]" {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back []Float
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back[0] != 1.5 || !math.IsNaN(float64(back[1])) || !math.IsNaN(float64(back[3])) || back[4] != 0 {
		t.Fatalf("Unmarshal = %v", back)
	}
	var f Float
	if err := json.Unmarshal([]byte(`"x"`), &f); err == nil {
		t.Fatal(`Unmarshal("x") into a Float: no error`)
	}
}
