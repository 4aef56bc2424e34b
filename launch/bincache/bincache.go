// Package bincache places an executable on other machines for `gotrain
// run --copy`: it streams the file over the user's ssh into a
// content-addressed cache, ~/.cache/gotrain/bin/<sha256>/<name>, verifies
// the hash there and returns the path to run. A copy already in the cache
// and still intact costs one short session and no transfer; a corrupted or
// truncated one is replaced. Nothing else is installed, and nothing but
// POSIX sh, mkdir, mktemp, cat, mv and sha256sum (or shasum) is needed on
// the host, so it works where gotrain is not installed yet.
package bincache

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/gotrain/gotrain/launch/ssh"
)

// Dir is the cache's directory, relative to the remote user's home.
const Dir = ".cache/gotrain/bin"

// Runner runs argv on host with stdin as its input and returns its
// standard output (internal/ssh.Client is one). An error names the
// host.
type Runner interface {
	Run(ctx context.Context, host string, stdin io.Reader, argv ...string) ([]byte, error)
}

// ErrCorrupt is wrapped by the error of a copy whose hash on the host is
// not the local file's.
var ErrCorrupt = errors.New("bincache: copy corrupted in transfer")

// File is a local file to place on hosts: its path, name in the cache and
// hash.
type File struct {
	Path   string // local path
	Name   string // base name, kept in the cache so the program sees its own name
	SHA256 string // hex
}

// Stat hashes the local file at path for Place.
func Stat(path string) (File, error) {
	f, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("bincache: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return File{}, fmt.Errorf("bincache: %w", err)
	} else if !st.Mode().IsRegular() {
		return File{}, fmt.Errorf("bincache: %s is not a regular file", path)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return File{}, fmt.Errorf("bincache: hash %s: %w", path, err)
	}
	return File{Path: path, Name: filepath.Base(path), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Ensure places the file at localPath in host's cache, unless an intact
// copy is already there, and returns the absolute path of the copy on
// host.
func Ensure(ctx context.Context, r Runner, host, localPath string) (string, error) {
	f, err := Stat(localPath)
	if err != nil {
		return "", err
	}
	return Place(ctx, r, host, f)
}

// EnsureAll is Ensure on every host at once, hashing the file once. It
// returns each host's path, in the order of hosts; its error has one line
// per host that failed.
func EnsureAll(ctx context.Context, r Runner, hosts []string, localPath string) ([]string, error) {
	f, err := Stat(localPath)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { paths[i], errs[i] = Place(ctx, r, h, f) })
	}
	wg.Wait()
	return paths, errors.Join(errs...)
}

// Place puts f in host's cache unless an intact copy is there, and
// returns the copy's absolute path on host. The copy is written to a
// temporary file beside its final name, verified and renamed, so a
// concurrent run, an interrupted transfer or a corrupted stream never
// leaves a file at the final name whose hash is not its directory's.
func Place(ctx context.Context, r Runner, host string, f File) (string, error) {
	if !validName(f.Name) || len(f.SHA256) != 64 {
		panic(fmt.Sprintf("bincache: Place: bad file %+v (use Stat)", f))
	}
	out, err := r.Run(ctx, host, nil, "sh", "-c", lookScript, "gotrain-bincache", f.SHA256, f.Name)
	if err != nil {
		return "", fmt.Errorf("copy %s to host %s: %w", f.Name, host, err)
	}
	state, path, _ := strings.Cut(lastLine(out), " ")
	switch state {
	case "present":
		return path, nil
	case "absent":
	default:
		return "", fmt.Errorf("copy %s to host %s: unexpected answer %q from the cache check", f.Name, host, out)
	}
	src, err := os.Open(f.Path)
	if err != nil {
		return "", fmt.Errorf("bincache: %w", err)
	}
	defer src.Close()
	// The hash is checked locally as the bytes go out too: a file changed
	// since Stat would otherwise be verified against the wrong hash.
	h := sha256.New()
	out, err = r.Run(ctx, host, io.TeeReader(src, h), "sh", "-c", putScript, "gotrain-bincache", f.SHA256, f.Name)
	if err != nil {
		if ee := (*ssh.ExitError)(nil); errors.As(err, &ee) && strings.HasPrefix(ee.Stderr, "copy corrupted") {
			return "", fmt.Errorf("%w: %s to host %s: %w", ErrCorrupt, f.Name, host, err)
		}
		return "", fmt.Errorf("copy %s to host %s: %w", f.Name, host, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return "", fmt.Errorf("copy %s to host %s: %s changed while it was being copied (sha256 %s, was %s)", f.Name, host, f.Path, got, f.SHA256)
	}
	path = lastLine(out)
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("copy %s to host %s: unexpected answer %q from the copy", f.Name, host, out)
	}
	return path, nil
}

// Stage streams f to a new temporary file in host's cache, beside its
// final name, without hashing it there, and returns the temporary file's
// absolute path. It is for an executable that proves its own hash when it
// runs (gotrain reports its build's sha256), which is faster than the
// host's sha256sum: once it has, Commit gives it its final name; if it
// has not, Discard removes it.
func Stage(ctx context.Context, r Runner, host string, f File) (string, error) {
	if !validName(f.Name) || len(f.SHA256) != 64 {
		panic(fmt.Sprintf("bincache: Stage: bad file %+v (use Stat)", f))
	}
	src, err := os.Open(f.Path)
	if err != nil {
		return "", fmt.Errorf("bincache: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return "", fmt.Errorf("bincache: %w", err)
	}
	h := sha256.New()
	// The size lets the host tell a whole copy from one cut short (a
	// launcher killed mid-transfer ends the stream early, not with an error).
	out, err := r.Run(ctx, host, io.TeeReader(src, h), "sh", "-c", stageScript, "gotrain-bincache", f.SHA256, f.Name, strconv.FormatInt(st.Size(), 10))
	if err != nil {
		return "", fmt.Errorf("copy %s to host %s: %w", f.Name, host, err)
	}
	path := lastLine(out)
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("copy %s to host %s: unexpected answer %q from the copy", f.Name, host, out)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		_ = Discard(ctx, r, host, path)
		return "", fmt.Errorf("copy %s to host %s: %s changed while it was being copied (sha256 %s, was %s)", f.Name, host, f.Path, got, f.SHA256)
	}
	return path, nil
}

// Commit renames the file Stage placed at staged on host, once its hash
// is proven to be f's, to its final name, and returns that.
func Commit(ctx context.Context, r Runner, host string, f File, staged string) (string, error) {
	final := filepath.Join(filepath.Dir(staged), f.Name)
	if filepath.Base(filepath.Dir(staged)) != f.SHA256 || !strings.HasPrefix(filepath.Base(staged), "."+f.Name+".") {
		panic(fmt.Sprintf("bincache: Commit: %s is not a staged copy of %+v", staged, f))
	}
	if _, err := r.Run(ctx, host, nil, "mv", "-f", staged, final); err != nil {
		return "", fmt.Errorf("copy %s to host %s: %w", f.Name, host, err)
	}
	return final, nil
}

// Discard removes the file Stage placed at staged on host.
func Discard(ctx context.Context, r Runner, host, staged string) error {
	if _, err := r.Run(ctx, host, nil, "rm", "-f", staged); err != nil {
		return fmt.Errorf("remove %s on host %s: %w", staged, host, err)
	}
	return nil
}

// lastLine is the last line of out: the script's answer, after anything
// the host's shell start-up files printed.
func lastLine(out []byte) string {
	s := strings.TrimSpace(string(out))
	return s[strings.LastIndex(s, "\n")+1:]
}

// validName is a file name that is safe as one path element.
func validName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00\n")
}

// hashFn, in both scripts, defines h FILE: the file's sha256 in hex, with
// whichever tool the host has.
const hashFn = `if command -v sha256sum >/dev/null 2>&1; then hs=sha256sum
elif command -v shasum >/dev/null 2>&1; then hs="shasum -a 256"
else echo "neither sha256sum nor shasum is installed" >&2; exit 1; fi
h() { $hs < "$1" | cut -c1-64; }
`

// lookScript prints "present PATH" when the cache holds an executable
// copy with the expected hash, else "absent PATH". $1 is the hash, $2 the
// name.
const lookScript = hashFn + `f="$HOME/` + Dir + `/$1/$2"
if [ -f "$f" ] && [ -x "$f" ] && [ "$(h "$f")" = "$1" ]; then echo "present $f"; else echo "absent $f"; fi
`

// putScript writes stdin to a temporary file in the cache, checks its
// hash, makes it executable and renames it to its final name, printing
// that; a wrong hash removes it and fails. The hash is taken of the
// bytes as they arrive, while tee writes them (a second read of the file
// would cost a cold start as long again as hashing it), and tee's success,
// recorded in a second temporary file, shows that every byte hashed
// was written.
const putScript = hashFn + `set -e
umask 077
d="$HOME/` + Dir + `/$1"
mkdir -p "$d"
t=$(mktemp "$d/.$2.XXXXXX")
w=$(mktemp "$d/.$2.XXXXXX")
trap 'rm -f "$t" "$w"' EXIT
got=$( { tee "$t" && echo written > "$w"; } | $hs | cut -c1-64)
if [ ! -s "$w" ]; then echo "cannot write the copy $t" >&2; exit 1; fi
rm -f "$w"
if [ "$got" != "$1" ]; then echo "copy corrupted: sha256 $got on arrival, want $1" >&2; exit 1; fi
chmod 700 "$t"
mv -f "$t" "$d/$2"
trap - EXIT
echo "$d/$2"
`

// stageScript writes stdin to a new executable temporary file in the
// cache and prints its path; a failed or short transfer removes it. $3 is
// the file's size.
const stageScript = `set -e
umask 077
d="$HOME/` + Dir + `/$1"
mkdir -p "$d"
t=$(mktemp "$d/.$2.XXXXXX")
trap 'rm -f "$t"' EXIT
cat > "$t"
n=$(wc -c < "$t")
if [ "$n" -ne "$3" ]; then echo "copy truncated: $n bytes arrived, want $3" >&2; exit 1; fi
chmod 700 "$t"
trap - EXIT
echo "$t"
`

// Static reports whether the file at path is a statically linked ELF
// executable (no PT_INTERP program header, so no dynamic loader or shared
// library must exist on the host), which is what --copy carries: a
// dynamically linked program or a script needs the rest of its system,
// which a copy would not bring.
func Static(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil // not ELF: a script or another format
		}
		return false, fmt.Errorf("bincache: %w", err)
	}
	defer f.Close()
	// A static PIE is ET_DYN with an entry point; a shared library has
	// none.
	if f.Type != elf.ET_EXEC && (f.Type != elf.ET_DYN || f.Entry == 0) {
		return false, nil
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}
