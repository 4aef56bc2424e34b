package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gotrain/gotrain/distributed/store"
)

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokenEnv, "from-env")
	if tok, err := loadToken(file); err != nil || string(tok) != "s3cret" {
		t.Fatalf("loadToken(file) = %q, %v", tok, err)
	}
	if tok, err := loadToken(""); err != nil || string(tok) != "from-env" {
		t.Fatalf("loadToken(env) = %q, %v", tok, err)
	}
	t.Setenv(tokenEnv, "")
	if _, err := loadToken(""); err == nil || !strings.Contains(err.Error(), tokenEnv) {
		t.Fatalf("loadToken with no token = %v; want an error naming %s", err, tokenEnv)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := loadToken(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("loadToken(missing file) = %v; want an error naming it", err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := loadToken(empty); err == nil {
		t.Fatal("loadToken accepted an empty token file")
	}
}

func TestStoreCommand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := newOutput(nil)
	done := make(chan error, 1)
	go func() { done <- serveStore(ctx, out, "127.0.0.1:0", []byte("tok"), time.Second) }()

	var addr string
	re := regexp.MustCompile(`listening on (\S+)`)
	out.waitFor(5*time.Second, func(s string) bool {
		if m := re.FindStringSubmatch(s); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	if addr == "" {
		t.Fatalf("no address printed; output %q", out.String())
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	defer dcancel()
	c, err := store.Dial(dctx, addr, []byte("tok"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(dctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveStore: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveStore did not stop after its context ended")
	}
}
