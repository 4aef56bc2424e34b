package preflight

import "github.com/gotrain/gotrain/distributed"

// The conversation with `gotrain preflight-node`, one JSON value per line:
// the launcher sends a request; the node answers with a probe, holding
// its ports open; the launcher sends a dialRequest once every node has
// answered; the node answers with a dialReport and keeps its ports open
// until its stdin closes, so that slower nodes can still dial it.

// request is what a node checks of itself.
type request struct {
	Token        string `json:"token"` // names this check's listeners, so a dial that reaches something else is told apart
	Node         int    `json:"node"`
	Workers      int    `json:"workers"`
	WorldSize    int    `json:"world_size"`
	WorkerMemory int64  `json:"worker_memory"`
	Shm          bool   `json:"shm"`     // the workers may use /dev/shm
	Program      string `json:"program"` // "" for none
	MasterPort   int    `json:"master_port"`
	PortMin      int    `json:"port_min"`
	PortMax      int    `json:"port_max"`
}

// probe is a node's answer about itself.
type probe struct {
	Build    distributed.Build `json:"build"`
	BuildErr string            `json:"build_err,omitempty"`
	// Executable is the node's own path, where the launcher ran it from
	// the cache without knowing its home directory.
	Executable string `json:"executable,omitempty"`

	ProgramPath    string `json:"program_path,omitempty"`
	ProgramSHA256  string `json:"program_sha256,omitempty"`
	ProgramMissing bool   `json:"program_missing,omitempty"`
	ProgramErr     string `json:"program_err,omitempty"`

	ShmNeed int64  `json:"shm_need"`
	ShmFree int64  `json:"shm_free"`
	ShmErr  string `json:"shm_err,omitempty"`

	MemAvailable int64  `json:"mem_available"`
	MemErr       string `json:"mem_err,omitempty"`

	Machine   string `json:"machine"`              // nodes with the same value share ports and addresses
	Held      []int  `json:"held"`                 // data-plane ports it listens on
	MasterErr string `json:"master_err,omitempty"` // why it could not listen on the master port
}

// dialRequest lists the nodes to dial.
type dialRequest struct {
	TimeoutMS int      `json:"timeout_ms"` // bounds one probe's longest attempt
	BudgetMS  int      `json:"budget_ms"`  // bounds all the probes; 0 means DefaultProbeBudget
	Targets   []target `json:"targets"`
}

// target is one node to dial: its address, its ports (the master port
// first on node 0), and which nodes may answer (it and the nodes on its
// machine, which share its ports).
type target struct {
	Node   int    `json:"node"`
	Addr   string `json:"addr"`
	Ports  []int  `json:"ports"`
	Accept []int  `json:"accept"`
}

// dialReport is a node's answer about the dials: the failed ones, and
// what every target's probes measured.
type dialReport struct {
	Dialed   int           `json:"dialed"`
	Failures []dialFailure `json:"failures"`
	Links    []linkStats   `json:"links"`
}

// dialFailure is one port of one target that could not be reached: every
// probe to it failed.
type dialFailure struct {
	Node     int    `json:"node"`
	Port     int    `json:"port"`
	Kind     string `json:"kind"`             // one of the kind constants
	IP       string `json:"ip,omitempty"`     // the address dialed
	Detail   string `json:"detail,omitempty"` // the system's message
	Probes   int    `json:"probes"`           // how many probes were sent to it, all failed
	TookMS   int    `json:"took_ms"`          // from its first probe to its last one's end
	Deadline bool   `json:"deadline"`         // the probe budget ended before it answered
}

// linkStats is what one node's probes to one target measured: how many
// it sent and how many were lost (timed out or cut) on the way, with
// the ports that lost any.
type linkStats struct {
	Node      int   `json:"node"`
	Probes    int   `json:"probes"`
	Lost      int   `json:"lost"`
	LostPorts []int `json:"lost_ports,omitempty"`
}

// Kinds of dial failure.
const (
	kindRefused    = "refused"    // nothing listening there, or a firewall rejecting
	kindTimeout    = "timed out"  // a firewall dropping, or an address not routed here
	kindLoopback   = "loopback"   // the name resolves to a loopback address here
	kindNoRoute    = "no route"   // the kernel has no route to the address
	kindResolve    = "unresolved" // the name does not resolve here
	kindWrongPeer  = "wrong peer" // something else answered at the address
	kindOtherError = "failed"
)
