package shm

import (
	"os"
	"strings"
	"testing"
)

func TestCreateOpenShare(t *testing.T) {
	if _, err := os.Stat("/dev/shm"); err != nil || !supported {
		t.Skip("no /dev/shm")
	}
	path, a, err := Create("test", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer Unmap(a)
	b, err := Open(path, 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer Unmap(b)
	a[8191] = 42
	if b[8191] != 42 {
		t.Fatalf("a write through one mapping is not seen through the other")
	}
	if _, err := Open(path, 4096); err == nil || !strings.Contains(err.Error(), "holds 8192 bytes, want 4096") {
		t.Fatalf("Open with the wrong size: %v", err)
	}
	if _, err := Open(path+"-missing", 8192); !os.IsNotExist(err) {
		t.Fatalf("Open of a missing file: %v", err)
	}
	Unmap(nil)
}
