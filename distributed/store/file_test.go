package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openFile(t *testing.T, path string) *File {
	t.Helper()
	f, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFileConformance(t *testing.T) {
	testConformance(t, func(t *testing.T) (Store, Store) {
		path := filepath.Join(t.TempDir(), "store")
		return openFile(t, path), openFile(t, path)
	})
}

func TestFileRemovedByLastUser(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	a, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, a, "k", "v")
	a.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("file gone while b still uses it: %v", err)
	}
	mustGet(t, b, "k", "v")
	b.Close()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there after its last user closed: %v", err)
	}
}

// A record torn by a writer that died mid-append is ignored by readers and
// cut off by the next writer.
func TestFileTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	a := openFile(t, path)
	mustSet(t, a, "before", "1")
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fh.Write([]byte{recSet, 0, 0, 0, 3, 0, 0, 0, 100, 'a', 'b'}) // claims more than it has
	fh.Close()
	b := openFile(t, path) // its join record replaces the torn one
	mustGet(t, b, "before", "1")
	mustSet(t, b, "after", "2")
	mustGet(t, a, "after", "2")
	if n, err := a.NumKeys(ctxFor(t, time.Second)); err != nil || n != 2 {
		t.Fatalf("NumKeys = %d, %v", n, err)
	}
}

func TestFileCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store")
	a := openFile(t, path)
	mustSet(t, a, "key", "value")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(raw), "value")
	raw[i] ^= 0xff
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = NewFile(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("NewFile on a corrupt log = %v; want an error naming the file", err)
	}
}

func TestFileOpenError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "dir", "store")
	_, err := NewFile(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("NewFile in a missing directory = %v; want an error naming the path", err)
	}
}
