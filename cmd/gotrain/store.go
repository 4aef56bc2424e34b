package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/gotrain/gotrain/distributed/store"
	"github.com/gotrain/gotrain/launch"
)

// tokenEnv names the environment variable holding the job's shared token.
const tokenEnv = launch.EnvToken

// newStoreCmd is `gotrain store`: a standalone TCP rendezvous store, for
// jobs whose store should outlive any one worker (elastic restarts,
// multi-node).
func newStoreCmd() *cobra.Command {
	var addr, tokenFile string
	var grace time.Duration
	var tlsf tlsFlags
	cmd := &cobra.Command{
		Use:   "store --addr host:port",
		Short: "Serve a standalone TCP rendezvous store",
		Long: `Serve a standalone TCP rendezvous store, the one rank 0 would otherwise
host. Workers reach it with MASTER_ADDR/MASTER_PORT (or tcp://host:port)
and must present the same token: set ` + tokenEnv + ` or pass --token-file.
With --tls-ca, --tls-cert and --tls-key (or GOTRAIN_TLS_*) every client
must also present a certificate signed by the CA, over TLS 1.3.
On SIGINT or SIGTERM the server stops accepting, waits up to --grace for
connected clients to leave, then exits.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkListenAddr("addr", addr); err != nil {
				return err
			}
			if grace < 0 {
				return badFlag("grace", grace, "must be at least 0")
			}
			token, err := loadToken(tokenFile)
			if err != nil && tokenFile != "" {
				return badFlag("token-file", tokenFile, rootCause(err))
			} else if err != nil {
				return usageError{err.Error()}
			}
			tc, err := tlsf.load()
			if err != nil {
				return err
			}
			return serveStore(cmd.Context(), cmd.OutOrStdout(), addr, token, grace, store.WithTLS(tc))
		},
	}
	// The port rank 0 serves the store on, which workers dial by default.
	cmd.Flags().StringVar(&addr, "addr", ":"+strconv.Itoa(launch.DefaultMasterPort), "listen address host:port (port 0 picks a free port)")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "read the shared token from this file instead of $"+tokenEnv)
	cmd.Flags().DurationVar(&grace, "grace", 5*time.Second, "on shutdown, how long to wait for clients to disconnect")
	tlsf.register(cmd.Flags())
	return cmd
}

// serveStore runs the store server until ctx ends, printing its address
// to out.
func serveStore(ctx context.Context, out io.Writer, addr string, token []byte, grace time.Duration, opts ...store.Option) error {
	srv, err := store.Listen(addr, token, opts...)
	if err != nil {
		return err
	}
	// The address line is the interface for scripts (port 0).
	fmt.Fprintf(out, "gotrain store listening on %s\n", srv.Addr())
	slog.Info("store: serving", "addr", srv.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// loadToken returns the shared token from tokenFile if given, else from
// $GOTRAIN_TOKEN. A standalone server faces the network, so it refuses to
// run without a token.
func loadToken(tokenFile string) ([]byte, error) {
	if tokenFile != "" {
		fi, err := os.Stat(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			slog.Warn("token file is readable by other users; chmod 600 it", "file", tokenFile, "mode", fi.Mode().Perm())
		}
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("token file: %w", err)
		}
		// Files written by echo or an editor end in a newline that is not
		// part of the token.
		b = bytes.TrimRight(b, "\r\n")
		if len(b) == 0 {
			return nil, fmt.Errorf("token file %s is empty", tokenFile)
		}
		return b, nil
	}
	if t := os.Getenv(tokenEnv); t != "" {
		return []byte(t), nil
	}
	return nil, fmt.Errorf("no token: set %s or pass --token-file (every worker needs the same token; e.g. head -c 32 /dev/urandom | base64)", tokenEnv)
}

// checkListenAddr refuses an address that is not host:port with a port in
// [0, 65535] (0: a free port).
func checkListenAddr(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return badFlag(name, addr, "must be host:port or :port")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return badFlag(name, addr, "port must be a number in [0, 65535]")
	}
	return nil
}
