package transport

import (
	"errors"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	hs := []Header{
		{Kind: KindCollective, Op: 1, DType: 2, RedOp: 3, Root: -1, Length: MaxPayload, Seq: 1<<64 - 1, Count: 1000003, Tag: 0},
		{Kind: KindP2P, DType: 4, Root: -1, Length: 0, Count: 0, Tag: -7},
		{Kind: KindAbort, Root: 5, Length: 12, Tag: AbortMismatch},
	}
	for _, h := range hs {
		var b [HeaderSize]byte
		h.Encode(b[:])
		got, err := Decode(b[:])
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got != h {
			t.Fatalf("round trip: got %+v, want %+v", got, h)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	var good [HeaderSize]byte
	(&Header{Kind: KindCollective, Length: 8}).Encode(good[:])
	cases := map[string]func(b []byte){
		"magic":            func(b []byte) { b[0] = 'x' },
		"version":          func(b []byte) { b[2] = 9 },
		"kind 0":           func(b []byte) { b[3] = 0 },
		"kind 200":         func(b []byte) { b[3] = 200 },
		"flags":            func(b []byte) { b[7] = 2 },
		"slot without shm": func(b []byte) { b[7] = 0x30 },
		"length":           func(b []byte) { b[15] = 0xff },
	}
	for name, mutate := range cases {
		b := good
		mutate(b[:])
		if _, err := Decode(b[:]); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
	if _, err := Decode(good[:10]); !errors.Is(err, ErrMalformed) {
		t.Errorf("short: got %v", err)
	}
}

// FuzzDecode: no input panics, every accepted header respects the payload
// bound and re-encodes to the same bytes, and decoding never allocates
// (apart from the error of a rejected input).
func FuzzDecode(f *testing.F) {
	var b [HeaderSize]byte
	(&Header{Kind: KindCollective, Op: 1, DType: 1, Root: -1, Length: 4096, Seq: 3, Count: 1024}).Encode(b[:])
	f.Add(b[:])
	(&Header{Kind: KindAbort, Length: MaxPayload}).Encode(b[:])
	f.Add(b[:])
	f.Add([]byte("gt"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := Decode(in)
		if err != nil {
			return
		}
		if h.Length > MaxPayload {
			t.Fatalf("accepted length %d > MaxPayload", h.Length)
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		if string(out[:]) != string(in[:HeaderSize]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", out, in[:HeaderSize])
		}
		if allocs := testing.AllocsPerRun(1, func() { Decode(in) }); allocs != 0 {
			t.Fatalf("Decode of a valid header allocated %v times", allocs)
		}
	})
}
