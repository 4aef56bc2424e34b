package mnist

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// ErrChecksum is wrapped by Download errors for a file whose MD5 sum is not
// the published one.
var ErrChecksum = errors.New("mnist: checksum mismatch")

// DefaultMirrors are the servers Download tries, in order: the mirrors
// torchvision uses.
var DefaultMirrors = []string{
	"https://ossci-datasets.s3.amazonaws.com/mnist/",
	"http://yann.lecun.com/exdb/mnist/",
}

// publishedMD5 maps the four gzipped IDX file names to their published MD5 sums.
var publishedMD5 = map[string]string{
	"train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
	"train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
	"t10k-images-idx3-ubyte.gz":  "9fb629c4189551a2d022fa330f9573f3",
	"t10k-labels-idx1-ubyte.gz":  "ec29112dd5afa0611ce80d1b7f02629c",
}

// fileOrder is the order Download fetches the files in.
var fileOrder = []string{
	"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
	"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
}

// maxFileSize bounds a download; the largest MNIST file is 9.9 MB.
const maxFileSize = 32 << 20

// Downloader fetches MNIST into a cache directory. The zero value works
// with the defaults documented on each field.
type Downloader struct {
	// Mirrors are base URLs (ending in "/") tried in order for each file.
	// Default DefaultMirrors.
	Mirrors []string
	// Client makes the requests. Default http.DefaultClient.
	Client *http.Client
	// Logger reports each download. Default slog.Default().
	Logger *slog.Logger
}

// Download fetches MNIST into cacheDir with the default Downloader.
func Download(ctx context.Context, cacheDir string) error {
	var d Downloader
	return d.Download(ctx, cacheDir)
}

// Download makes sure cacheDir holds the four gzipped IDX files with their
// published MD5 sums, ready for Load(cacheDir, …). Files already present
// and valid are not fetched again; an invalid one is replaced. Each file is
// written to a temporary file in cacheDir, checked and renamed into place,
// so the cache never holds a partial or corrupt file. A file whose every
// mirror fails (network, HTTP status, checksum) makes Download return an
// error naming the file and each mirror's failure; a cancelled ctx stops
// it with an error wrapping ctx.Err().
func (d *Downloader) Download(ctx context.Context, cacheDir string) error {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fmt.Errorf("mnist: cache directory: %w", err)
	}
	mirrors := d.Mirrors
	if len(mirrors) == 0 {
		mirrors = DefaultMirrors
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	for _, name := range fileOrder {
		want := publishedMD5[name]
		dst := filepath.Join(cacheDir, name)
		if sum, err := fileMD5(dst); err == nil && sum == want {
			log.Debug("mnist: cached file is valid", "file", dst)
			continue
		}
		var errs []error
		for _, mirror := range mirrors {
			url := strings.TrimSuffix(mirror, "/") + "/" + name
			log.Info("mnist: downloading", "url", url)
			err := d.fetch(ctx, url, dst, want)
			if err == nil {
				errs = nil
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("mnist: download %s: %w", name, ctx.Err())
			}
			log.Warn("mnist: mirror failed", "url", url, "err", err)
			errs = append(errs, err)
		}
		if errs != nil {
			return fmt.Errorf("mnist: download %s: every mirror failed: %w", name, errors.Join(errs...))
		}
	}
	return nil
}

// fetch downloads url into dst through a temporary file, keeping it only
// if its MD5 sum is want.
func (d *Downloader) fetch(ctx context.Context, url, dst, want string) (err error) {
	client := d.Client
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err // *url.Error names the URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP status %s", url, resp.Status)
	}

	tmp, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".*.partial")
	if err != nil {
		return fmt.Errorf("mnist: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	hash := md5.New()
	n, err := io.Copy(io.MultiWriter(tmp, hash), io.LimitReader(resp.Body, maxFileSize+1))
	if err != nil {
		return fmt.Errorf("%s: after %d bytes: %w", url, n, err)
	}
	if n > maxFileSize {
		return fmt.Errorf("%s: larger than %d bytes, not an MNIST file", url, maxFileSize)
	}
	if got := hex.EncodeToString(hash.Sum(nil)); got != want {
		return fmt.Errorf("%w: %s: MD5 %s, want %s (%d bytes)", ErrChecksum, url, got, want, n)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("mnist: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("mnist: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("mnist: %w", err)
	}
	return nil
}

// fileMD5 returns the hex MD5 sum of the file at path.
func fileMD5(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
