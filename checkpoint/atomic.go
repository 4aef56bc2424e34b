package checkpoint

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// tempFile is what a save needs of the temporary file it writes;
// *os.File implements it.
type tempFile interface {
	io.Writer
	Name() string
	Chmod(mode fs.FileMode) error
	Sync() error
	Close() error
}

// createTemp creates a save's temporary file. It is a variable so that
// tests can make writes fail as a full disk does.
var createTemp = func(dir, pattern string) (tempFile, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// WriteFileAtomic writes a file at path with the bytes write produces, so
// that path holds either its previous content or all of the new content,
// never a mix or a prefix, whatever happens (an error from write, a full
// disk, a crash or power loss).
//
// The data goes to a temporary file in path's directory (a rename is only
// atomic within one file system), which is fsynced, given mode 0644,
// renamed over path, and then the directory is fsynced so that the rename
// itself survives a crash. On error the temporary file is removed and path
// is untouched.
func WriteFileAtomic(path string, write func(w io.Writer) error) error {
	tmp, err := writeTemp(path, write)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		// The new file is in place; only its durability across a crash
		// is in doubt. Report it: the caller asked for a durable save.
		return fmt.Errorf("checkpoint: writing %s: fsync directory: %w", path, err)
	}
	return nil
}

// writeTemp writes what write produces to a new temporary file beside
// path, fsynced, mode 0644 and closed, and returns its name. On error it
// removes the file; errors name path.
func writeTemp(path string, write func(w io.Writer) error) (_ string, err error) {
	f, err := createTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return "", fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return "", fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return "", fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("checkpoint: writing %s: fsync: %w", path, err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	return tmp, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		// Some file systems cannot fsync a directory; the rename is as
		// durable as they can make it.
		return nil
	}
	return err
}
