package distributed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"

	"github.com/gotrain/gotrain/distributed/internal/auth"
	"github.com/gotrain/gotrain/distributed/store"
)

// modulePath is gotrain's module, whose version a build identity names.
const modulePath = "github.com/gotrain/gotrain"

// buildKey prefixes, in a group's store namespace, the key under which
// each rank publishes its build identity.
const buildKey = "build/"

// buildID is what a rank publishes of the program it runs, so that a rank
// started from another build (a node not redeployed, a stale copy) is
// refused at rendezvous rather than computing something else.
type buildID struct {
	Version  string `json:"version"`  // gotrain's module version ("(devel)" in a work tree)
	Protocol int    `json:"protocol"` // auth.ProtocolVersion
	SHA256   string `json:"sha256"`   // of the running executable, hex
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Host     string `json:"host"`
}

// sameBuild reports whether a and b run the same program. The platform and
// host are there to name the builds, not to compare: a different platform
// has a different hash anyway.
func (a buildID) sameBuild(b buildID) bool {
	return a.SHA256 == b.SHA256 && a.Version == b.Version && a.Protocol == b.Protocol
}

// describe names b for an error: host, short hash, version, protocol and
// platform.
func (b buildID) describe(rank int) string {
	return fmt.Sprintf("rank %d on %s runs %s (gotrain %s, protocol %d, %s/%s)",
		rank, b.Host, shortHash(b.SHA256), b.Version, b.Protocol, b.OS, b.Arch)
}

// shortHash is the first 12 hex digits of a hash, enough to tell builds
// apart at a glance.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// localBuild is this process's build identity, computed once: hashing
// the executable reads the whole file, which no second Init need repeat.
var localBuild = sync.OnceValues(computeBuild)

// computeBuild reads this process's build identity.
func computeBuild() (buildID, error) {
	b := buildID{Version: "unknown", Protocol: auth.ProtocolVersion, OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == modulePath {
			b.Version = bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				b.Version = d.Version
			}
		}
	}
	var err error
	if b.Host, err = os.Hostname(); err != nil {
		b.Host = "unknown host"
	}
	exe, err := os.Executable()
	if err != nil {
		return b, fmt.Errorf("find this program's executable to hash it: %w", err)
	}
	b.SHA256, err = hashFile(exe)
	return b, err
}

// hashFile returns the sha256 of the file at path, in hex.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open this program's executable to hash it: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash this program's executable %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkBuild publishes this rank's build identity in st and, on ranks
// other than 0, compares it with rank 0's (comparing every rank with one
// finds any difference). A different build is a configuration mistake,
// which connect records for every rank, unless cfg.AllowMixedBuilds, in
// which case it is logged.
func checkBuild(ctx context.Context, cfg Config, st store.Store, rank int, where string) error {
	mine, err := localBuild()
	if err != nil {
		if !cfg.AllowMixedBuilds {
			return fmt.Errorf("%s: build check: %w (GOTRAIN_ALLOW_MIXED_BUILDS=1 skips it)", where, err)
		}
		// Rank 0 must publish something: the others wait for it.
		mine.SHA256 = "unavailable"
	}
	b, err := json.Marshal(mine)
	if err != nil {
		panic("distributed: marshal build identity: " + err.Error()) // a struct of strings and ints
	}
	if err := st.Set(ctx, buildKey+strconv.Itoa(rank), b); err != nil {
		return fmt.Errorf("%s: publish build identity: %w", where, err)
	}
	if rank == 0 {
		return nil
	}
	got, err := st.Get(ctx, buildKey+"0")
	if err != nil {
		return fmt.Errorf("%s: read rank 0's build identity: %w", where, err)
	}
	var theirs buildID
	if err := json.Unmarshal(got, &theirs); err != nil {
		return fmt.Errorf("%w: %s: rank 0 published a malformed build identity %q: %v", ErrConfig, where, got, err)
	}
	if mine.sameBuild(theirs) {
		return nil
	}
	if cfg.AllowMixedBuilds {
		cfg.Logger.Info("distributed: this rank runs another build than rank 0 (allowed by GOTRAIN_ALLOW_MIXED_BUILDS)",
			"rank", rank, "host", mine.Host, "sha256", shortHash(mine.SHA256),
			"rank0_host", theirs.Host, "rank0_sha256", shortHash(theirs.SHA256))
		return nil
	}
	return fmt.Errorf("%w: %s: build mismatch: %s, but %s; run one build on every node, or set GOTRAIN_ALLOW_MIXED_BUILDS=1 to allow it (sha256 of rank %d: %s, of rank 0: %s)",
		ErrConfig, where, mine.describe(rank), theirs.describe(0), rank, mine.SHA256, theirs.SHA256)
}

// Build is a program's build identity as every rank publishes it at
// rendezvous: gotrain's version, the protocol version and the sha256 of
// the running executable, with the platform and host that name it.
// Launchers compare it before starting workers (pre-flight), so the
// mismatch that rendezvous would refuse is found first.
type Build struct {
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	SHA256   string `json:"sha256"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Host     string `json:"host"`
}

// LocalBuild returns this process's build identity, the one its ranks
// would publish at rendezvous.
func LocalBuild() (Build, error) {
	b, err := localBuild()
	return Build(b), err
}

// SameBuild reports whether a and b are the same build, as rendezvous
// decides it (hash, version and protocol; not platform or host).
func (a Build) SameBuild(b Build) bool { return buildID(a).sameBuild(buildID(b)) }

// String names the build: short hash, version, protocol and platform.
func (a Build) String() string {
	return fmt.Sprintf("%s (gotrain %s, protocol %d, %s/%s)", shortHash(a.SHA256), a.Version, a.Protocol, a.OS, a.Arch)
}
