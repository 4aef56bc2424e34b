package mnist

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mirror serves the shipped files, optionally corrupting one, and counts
// requests.
type mirror struct {
	corrupt  string // file served with a flipped byte
	missing  string // file answered with 404
	requests atomic.Int64
}

func (m *mirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.requests.Add(1)
	name := path.Base(r.URL.Path)
	b, err := shipped.ReadFile(path.Join("data", name))
	if err != nil || name == m.missing {
		http.NotFound(w, r)
		return
	}
	if name == m.corrupt {
		b = slices.Clone(b)
		b[len(b)/2] ^= 1
	}
	w.Write(b)
}

func quietDownloader(mirrors ...string) *Downloader {
	return &Downloader{Mirrors: mirrors, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func cacheEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDownload(t *testing.T) {
	m := &mirror{}
	srv := httptest.NewServer(m)
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "cache", "mnist")
	d := quietDownloader(srv.URL + "/mnist/")
	if err := d.Download(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if got := cacheEntries(t, dir); len(got) != 4 {
		t.Fatalf("cache holds %v", got)
	}
	ds, err := Load(dir, Test)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 10000 {
		t.Fatalf("downloaded test split has %d images", ds.Len())
	}

	// A second call finds every file valid and asks for nothing.
	before := m.requests.Load()
	if err := d.Download(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if n := m.requests.Load() - before; n != 0 {
		t.Fatalf("second Download made %d requests", n)
	}

	// A damaged cached file is fetched again.
	damaged := filepath.Join(dir, "t10k-labels-idx1-ubyte.gz")
	if err := os.WriteFile(damaged, []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Download(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if n := m.requests.Load() - before; n != 1 {
		t.Fatalf("repairing one file made %d requests", n)
	}
	if sum, _ := fileMD5(damaged); sum != publishedMD5["t10k-labels-idx1-ubyte.gz"] {
		t.Fatal("damaged file not replaced")
	}
}

func TestDownloadRejectsCorruptFile(t *testing.T) {
	bad := httptest.NewServer(&mirror{corrupt: "t10k-images-idx3-ubyte.gz"})
	defer bad.Close()
	gone := httptest.NewServer(&mirror{missing: "t10k-images-idx3-ubyte.gz"})
	defer gone.Close()

	dir := t.TempDir()
	err := quietDownloader(bad.URL+"/", gone.URL+"/").Download(context.Background(), dir)
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("error %v does not wrap ErrChecksum", err)
	}
	for _, want := range []string{"t10k-images-idx3-ubyte.gz", "MD5", "9fb629c4189551a2d022fa330f9573f3", "404", bad.URL, gone.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// The files before it are in place; neither the corrupt one nor a
	// temporary file is.
	got := cacheEntries(t, dir)
	if !slices.Equal(got, []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
		t.Fatalf("cache holds %v after a corrupt download", got)
	}

	// A good mirror after the bad one completes the cache.
	good := httptest.NewServer(&mirror{})
	defer good.Close()
	if err := quietDownloader(bad.URL, good.URL).Download(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	if got := cacheEntries(t, dir); len(got) != 4 {
		t.Fatalf("cache holds %v", got)
	}
}

func TestDownloadCancel(t *testing.T) {
	started := make(chan struct{})
	var once sync.Once
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "9912422")
		w.Write(make([]byte, 100<<10))
		w.(http.Flusher).Flush()
		once.Do(func() { close(started) })
		select { // stall mid-body until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	dir := t.TempDir()
	errc := make(chan error, 1)
	go func() { errc <- quietDownloader(srv.URL+"/", srv.URL+"/").Download(ctx, dir) }()
	<-started
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v does not wrap context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Download did not return after cancel")
	}
	if got := cacheEntries(t, dir); len(got) != 0 {
		t.Fatalf("cancelled download left %v", got)
	}
}

func TestDownloadBadCacheDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := quietDownloader("http://127.0.0.1:1/").Download(context.Background(), filepath.Join(file, "sub"))
	if err == nil || !strings.Contains(err.Error(), "cache directory") {
		t.Fatalf("error %v", err)
	}
}
