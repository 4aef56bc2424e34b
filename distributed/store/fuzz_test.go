package store

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to the frame reader: no panic, no
// frame past the bound, and a declared length it did not receive is an
// error.
func FuzzReadFrame(f *testing.F) {
	f.Add(encodeRequest(request{id: 1, op: opSet, key: "k", value: []byte("v")}).finish())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x01, 0, 0, 0, 1, 2, 3}) // claims 16 MiB, sends 3 bytes
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		consumed := 0
		for {
			fr, err := readFrame(r, MaxFrameSize)
			if err != nil {
				return
			}
			consumed += 4 + 9 + len(fr.body)
			if consumed > len(data) {
				t.Fatalf("read %d bytes of frames from %d bytes of input", consumed, len(data))
			}
		}
	})
}

// FuzzDecodeRequest checks that any request the server accepts re-encodes
// to the same bytes, and that nothing panics.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []request{
		{id: 1, op: opSet, key: "rank/0", value: []byte("10.0.0.1:29500")},
		{id: 2, op: opGet, key: "k"},
		{id: 3, op: opAdd, key: "n", delta: -5},
		{id: 4, op: opCAS, key: "k", expected: []byte("a"), desired: []byte("b")},
		{id: 5, op: opWait, keys: []string{"a", "bb", ""}},
		{id: 6, op: opDelete, key: "k"},
		{id: 7, op: opNumKeys},
		{id: 8, op: opCancel},
	} {
		f.Add(encodeRequest(r).finish()[4:])
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if len(payload) < 9 {
			return
		}
		fr := frame{id: 0, code: payload[8], body: payload[9:]}
		for i := range 8 {
			fr.id = fr.id<<8 | uint64(payload[i])
		}
		r, err := decodeRequest(fr)
		if err != nil {
			return
		}
		if got := encodeRequest(r).finish()[4:]; !bytes.Equal(got, payload) {
			t.Fatalf("request %x re-encodes as %x", payload, got)
		}
	})
}
