// Package agent is the node side of a job launched on several machines:
// `gotrain agent`, started on each host over ssh by package fanout. It
// reads its job on stdin, runs each attempt of its node's workers with
// package launch, hosts the rendezvous store on node 0 for the whole job,
// and streams the workers' output, progress events, failures and log
// files back on stdout. The launcher decides; the agent acts: it starts an
// attempt when told, stops it when told, and kills its workers when stdin
// ends (ssh dropped, launcher killed) or the launcher's heartbeat stops.
//
// The protocol is newline-delimited JSON in both directions: first a Job
// from the launcher, then Messages. JSON escapes newlines inside strings,
// so one line is one message.
package agent

import (
	"time"

	"github.com/gotrain/gotrain/launch"
)

// Job is one node's share of a job, the first line the launcher sends.
// The token travels only here, on stdin: never on a command line or in a
// file that other users could read.
type Job struct {
	// Host is the name the launcher reaches this node by, used in reports.
	Host string `json:"host"`
	// Program and Args are the worker command, as launch.Config has them.
	Program string   `json:"program"`
	Args    []string `json:"args,omitempty"`
	// Dir is the launcher's working directory: the workers run there if
	// the host has it, else where the agent runs (the ssh login's home).
	Dir string `json:"dir,omitempty"`
	// Env is added to the agent's environment for the workers (the
	// launcher forwards its GOTRAIN_* settings this way).
	Env []string `json:"env,omitempty"`
	// Token is the job's GOTRAIN_TOKEN.
	Token string `json:"token"`
	// NodeRank, NNodes and NProcPerNode place this node in the job;
	// RankOffset and WorldSize are launch.Config's, for nodes that run
	// different numbers of workers (0: every node runs NProcPerNode).
	NodeRank     int `json:"node_rank"`
	NNodes       int `json:"nnodes"`
	NProcPerNode int `json:"nproc_per_node"`
	RankOffset   int `json:"rank_offset,omitempty"`
	WorldSize    int `json:"world_size,omitempty"`
	// MasterAddr and MasterPort are where node 0's agent serves the store.
	MasterAddr string `json:"master_addr"`
	MasterPort int    `json:"master_port"`
	// RunID names the job; MaxRestarts is told to the workers (the
	// launcher decides the restarts).
	RunID       string `json:"run_id"`
	MaxRestarts int    `json:"max_restarts"`
	// StopTimeout and MonitorInterval are launch.Config's (0: defaults).
	StopTimeout     time.Duration `json:"stop_timeout,omitempty"`
	MonitorInterval time.Duration `json:"monitor_interval,omitempty"`
	// HeartbeatTimeout is how long the agent waits for any message from
	// the launcher before it stops its workers and exits (0 means
	// DefaultHeartbeatTimeout).
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// LogDir makes the agent keep the workers' log files (in a private
	// temporary directory) and send what they gain while the workers run,
	// every half second and at the end of the attempt.
	LogDir bool `json:"log_dir,omitempty"`
	// Redirects, Tee and LocalRanksFilter are launch.Config's.
	Redirects        launch.Streams `json:"redirects"`
	Tee              launch.Streams `json:"tee"`
	LocalRanksFilter []int          `json:"local_ranks_filter,omitempty"`
	// Events gives the workers an events pipe, whose lines come back as
	// "event" messages.
	Events bool `json:"events,omitempty"`
	// LogFormat is the format of the agent's own log records (text or
	// json), which come back as stderr output.
	LogFormat string `json:"log_format,omitempty"`
	// FT runs the node's workers fault-tolerant (launch.Config.FT, with
	// replica IDs on Host): a failed worker is restarted alone.
	FT bool `json:"ft,omitempty"`
}

// DefaultHeartbeatTimeout is how long either side waits for a message
// from the other before it declares it lost; each sends one at least every
// HeartbeatInterval.
const (
	DefaultHeartbeatTimeout = 5 * time.Second
	HeartbeatInterval       = time.Second
)

// Message types. The launcher sends Start, Stop and Heartbeat; the agent
// sends the others and Heartbeat.
const (
	// Start runs attempt Restart (the restart count) of the node's workers.
	Start = "start"
	// Stop ends the running attempt: its workers get Signal (SIGTERM if 0).
	Stop = "stop"
	// Heartbeat says the sender is alive.
	Heartbeat = "heartbeat"
	// Ready: the agent read its job (and node 0 serves the store); Addr
	// is the store's address on node 0.
	Ready = "ready"
	// Output is a piece of the workers' console output (whole lines, each
	// prefixed "[rankN]: ") or of the agent's log records: Stream 1 is
	// stdout, 2 stderr.
	Output = "out"
	// Event is one progress event line of global rank Rank.
	Event = "event"
	// Failed: a worker of attempt Restart failed, at once, before the
	// others are stopped; Failure has the stderr read so far.
	Failed = "failed"
	// File is a piece of a worker log file of attempt Restart: Path is
	// relative to the node's log directory, Data is appended to it.
	File = "file"
	// Exit: attempt Restart ended with Code (0 all workers succeeded,
	// 128+signal when stopped), Failure the root cause if a worker
	// failed, Interrupted if it was stopped, Error if it could not run.
	Exit = "exit"
)

// Message is one line of the protocol after the Job.
type Message struct {
	Type        string          `json:"type"`
	Restart     int             `json:"restart,omitempty"`
	Signal      int             `json:"signal,omitempty"`
	Stream      int             `json:"stream,omitempty"`
	Rank        int             `json:"rank,omitempty"`
	Data        []byte          `json:"data,omitempty"`
	Path        string          `json:"path,omitempty"`
	Code        int             `json:"code,omitempty"`
	Failure     *launch.Failure `json:"failure,omitempty"`
	Interrupted bool            `json:"interrupted,omitempty"`
	Error       string          `json:"error,omitempty"`
	Addr        string          `json:"addr,omitempty"`
}

// MaxLine bounds one protocol line; a longer one is an error, not an
// unbounded allocation.
const MaxLine = 4 << 20
