package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// tlsFlags are --tls-ca, --tls-cert and --tls-key: mutual TLS for the
// store and the data plane, which `run`, `train` and `store` take and
// give their workers as GOTRAIN_TLS_CA, GOTRAIN_TLS_CERT and
// GOTRAIN_TLS_KEY (read by distributed.Init).
type tlsFlags struct{ ca, cert, key string }

// register defines the flags on f.
func (t *tlsFlags) register(f *pflag.FlagSet) {
	f.StringVar(&t.ca, "tls-ca", "", "mutual TLS: the CA certificate (PEM) every peer's certificate must chain to (default $"+tlsconf.EnvCA+"; see gotrain tls init)")
	f.StringVar(&t.cert, "tls-cert", "", "mutual TLS: this node's certificate (PEM); {host} stands for the host's name (default $"+tlsconf.EnvCert+")")
	f.StringVar(&t.key, "tls-key", "", "mutual TLS: the key of --tls-cert (PEM); {host} as there (default $"+tlsconf.EnvKey+")")
}

// files returns the flags' files, or the environment's when no flag is
// given, with relative paths made absolute (workers may run elsewhere).
func (t tlsFlags) files() tlsconf.Files {
	f := tlsconf.Files{CA: t.ca, Cert: t.cert, Key: t.key}
	if !f.Enabled() {
		f = tlsconf.FromEnv(os.LookupEnv)
	}
	for _, p := range []*string{&f.CA, &f.Cert, &f.Key} {
		if *p != "" {
			if abs, err := filepath.Abs(*p); err == nil {
				*p = abs
			}
		}
	}
	return f
}

// check refuses, with one line, TLS settings that cannot work: not all
// three files, or files that do not load (see tlsconf.Load). With remote
// set (the workers run on other hosts) files this machine does not have
// are left for the workers to check; so are the per-host files of a
// {host} pattern.
func (t tlsFlags) check(remote bool) error {
	f := t.files()
	if !f.Enabled() {
		return nil
	}
	if f.CA == "" || f.Cert == "" || f.Key == "" {
		_, err := tlsconf.Load(f)
		return usageError{err.Error()}
	}
	if strings.Contains(f.Cert+f.Key, tlsconf.HostPattern) {
		f = f.Expand(tlsconf.HostName(os.LookupEnv))
	}
	if remote {
		for _, p := range []string{f.CA, f.Cert, f.Key} {
			if _, err := os.Stat(p); err != nil {
				return nil
			}
		}
	}
	if _, err := tlsconf.Load(f); err != nil {
		return usageError{err.Error()}
	}
	return nil
}

// export sets GOTRAIN_TLS_* for this process and the workers it starts,
// which inherit its environment (and, on other hosts, get it through
// their agent).
func (t tlsFlags) export() {
	f := t.files()
	if !f.Enabled() {
		return
	}
	os.Setenv(tlsconf.EnvCA, f.CA)
	os.Setenv(tlsconf.EnvCert, f.Cert)
	os.Setenv(tlsconf.EnvKey, f.Key)
}

// load loads the flags' (or the environment's) TLS settings; nil without
// any.
func (t tlsFlags) load() (*tlsconf.Config, error) {
	f := t.files()
	if !f.Enabled() {
		return nil, nil
	}
	c, err := tlsconf.Load(f.Expand(tlsconf.HostName(os.LookupEnv)))
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return c, nil
}

// newTLSCmd is `gotrain tls`: the certificates of mutual TLS.
func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls init DIR --hosts HOST,...",
		Short: "Make the certificates of mutual TLS for a small cluster",
		Args:  cobra.ArbitraryArgs,
		RunE:  unknownSubcommand,
	}
	cmd.AddCommand(newTLSInitCmd())
	return cmd
}

// newTLSInitCmd is `gotrain tls init`.
func newTLSInitCmd() *cobra.Command {
	var hosts string
	var days int
	cmd := &cobra.Command{
		Use:   "init DIR --hosts HOST,...",
		Short: "Make a CA and a certificate per host in DIR",
		Long: `Init makes a new CA and, for each host of --hosts, a certificate it signed,
in DIR: ca.pem, ca-key.pem and HOST.pem, HOST-key.pem per host (ECDSA
P-256; keys mode 0600; each certificate names its host as a DNS or IP
subject alternative name and serves as TLS server and client). It never
overwrites a file.

Copy ca.pem and a host's HOST.pem and HOST-key.pem to that host (keep
ca-key.pem off the nodes), then run the job with --tls-ca, --tls-cert and
--tls-key (or GOTRAIN_TLS_CA, GOTRAIN_TLS_CERT, GOTRAIN_TLS_KEY); {host}
in the certificate and key paths stands for each host's name in --hosts.
Every certificate the CA signed is a member of the cluster: host names
are not checked.`,
		Example: `  gotrain tls init ./tls --hosts node0,node1,10.0.0.3
  gotrain run --hosts node0:2,node1:2 --tls-ca ./tls/ca.pem \
      --tls-cert './tls/{host}.pem' --tls-key './tls/{host}-key.pem' ./mytrainer`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("tls init: want one DIR argument (usage: gotrain tls init DIR --hosts HOST,...), got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("hosts") {
				return usagef("tls init: --hosts is required: the hosts to make certificates for, e.g. --hosts node0,node1")
			}
			hs, err := tlsconf.ParseHosts(hosts)
			if err != nil {
				return badFlag("hosts", hosts, strings.TrimPrefix(err.Error(), tlsconf.ErrConfig.Error()+": "))
			}
			if days <= 0 {
				return badFlag("days", days, "must be at least 1")
			}
			return tlsInit(cmd.OutOrStdout(), args[0], hs, time.Duration(days)*24*time.Hour)
		},
	}
	cmd.Flags().StringVar(&hosts, "hosts", "", "comma-separated host names or IP addresses (node0:2 and user@node0 are read as node0)")
	cmd.Flags().IntVar(&days, "days", int(tlsconf.DefaultValidity/(24*time.Hour)), "days the certificates are valid")
	return cmd
}

// tlsInit writes the files and says what it wrote.
func tlsInit(out io.Writer, dir string, hosts []string, validity time.Duration) error {
	if err := tlsconf.Generate(dir, hosts, validity); err != nil {
		if errors.Is(err, tlsconf.ErrConfig) {
			return usagef("tls init: %s", strings.TrimPrefix(err.Error(), tlsconf.ErrConfig.Error()+": "))
		}
		return fmt.Errorf("tls init: %w", err)
	}
	fmt.Fprintf(out, "wrote %s and %s (keep the key off the nodes)\n", filepath.Join(dir, tlsconf.CAFile), filepath.Join(dir, tlsconf.CAKeyFile))
	for _, h := range hosts {
		fmt.Fprintf(out, "wrote %s and %s\n", filepath.Join(dir, tlsconf.CertFile(h)), filepath.Join(dir, tlsconf.KeyFile(h)))
	}
	fmt.Fprintf(out, "use: --tls-ca %s --tls-cert '%s' --tls-key '%s'\n", filepath.Join(dir, tlsconf.CAFile),
		filepath.Join(dir, tlsconf.CertFile(tlsconf.HostPattern)), filepath.Join(dir, tlsconf.KeyFile(tlsconf.HostPattern)))
	return nil
}
