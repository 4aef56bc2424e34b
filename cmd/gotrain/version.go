package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// newVersionCmd is `gotrain version`.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print gotrain's version, build and the sha256 of this executable",
		Long: `Version prints the module version, the Go version, the source revision the
binary was built from (with its time, and whether the tree had changes),
the platform, and the path and sha256 of the running executable: what
every rank of a job must share (compare sha256sum on each machine).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeVersion(cmd.OutOrStdout())
		},
	}
}

// writeVersion writes the version report to w.
func writeVersion(w io.Writer) error {
	var b strings.Builder
	version, settings := "(unknown)", map[string]string{}
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	fmt.Fprintf(&b, "gotrain %s\n", version)
	fmt.Fprintf(&b, "go: %s\n", goVersion)
	if rev := settings["vcs.revision"]; rev != "" {
		mod := ""
		if settings["vcs.modified"] == "true" {
			mod = ", modified"
		}
		fmt.Fprintf(&b, "revision: %s (%s%s)\n", rev, orUnknown(settings["vcs.time"]), mod)
	} else {
		b.WriteString("revision: unknown (built without version control information)\n")
	}
	fmt.Fprintf(&b, "platform: %s/%s\n", runtime.GOOS, runtime.GOARCH)
	exe, sum, err := executableSHA256()
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	fmt.Fprintf(&b, "executable: %s\nsha256: %s\n", exe, sum)
	_, err = io.WriteString(w, b.String())
	return err
}

// orUnknown is s, or "time unknown" for "".
func orUnknown(s string) string {
	if s == "" {
		return "time unknown"
	}
	return s
}

// executableSHA256 is the path of the running executable and the hex
// sha256 of its file.
func executableSHA256() (path, sum string, err error) {
	if path, err = os.Executable(); err != nil {
		return "", "", fmt.Errorf("finding the executable: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	return path, hex.EncodeToString(h.Sum(nil)), nil
}
