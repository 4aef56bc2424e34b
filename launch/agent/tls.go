package agent

import (
	"strings"

	"github.com/gotrain/gotrain/distributed/tlsconf"
)

// withTLSHost returns env with tlsconf.EnvHost set to host when env holds
// TLS settings: "{host}" in the workers' certificate paths then names
// this node as the launcher's host list does, whatever the launcher's
// own environment forwarded.
func withTLSHost(env []string, host string) []string {
	if !tlsconf.FromEnv(envLookup(env)).Enabled() {
		return env
	}
	return append(env, tlsconf.EnvHost+"="+host)
}

// envLookup looks keys up in env (KEY=VALUE entries, the last one wins),
// as os.LookupEnv does in the process's environment.
func envLookup(env []string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
				return v, true
			}
		}
		return "", false
	}
}
