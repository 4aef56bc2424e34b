package gptjob

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyShards: a train shard with a flipped byte (still a valid
// token id) trains without VerifyShards and is refused at start, named,
// with it; a missing train shard is named with the host checked.
func TestVerifyShards(t *testing.T) {
	dir := prepared(t, "bytes", 256)
	path := filepath.Join(dir, "train-000001.bin")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := tiny()
	cfg.Data, cfg.MaxSteps = dir, 1
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatalf("without VerifyShards: %v", err)
	}
	cfg.VerifyShards = true
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), path+" does not match its sha256 in index.json") {
		t.Errorf("with VerifyShards: err = %v, want it to name %s", err, path)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	cfg.VerifyShards = false
	_, err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "train-000001.bin is on no host: checked ") || !strings.HasSuffix(err.Error(), " in "+dir) {
		t.Errorf("a missing shard: err = %v, want it named, with the host checked and %s", err, dir)
	}
}
