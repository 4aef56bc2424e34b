package clusterenv

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// envOf makes a Lookup from "NAME=value" pairs.
func envOf(kv ...string) Lookup {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// slurmStep is srun -N 3 -n 7's environment for task 4 (node 1).
var slurmStep = []string{"SLURM_JOB_ID=123456", "SLURM_STEP_ID=0", "SLURM_PROCID=4", "SLURM_NTASKS=7",
	"SLURM_LOCALID=1", "SLURM_NODEID=1", "SLURM_NNODES=3", "SLURM_STEP_TASKS_PER_NODE=3,2(x2)",
	"SLURM_STEP_NODELIST=gnode[01-02,07]", "SLURM_JOB_NODELIST=gnode[01-04,07]"}

func with(base []string, kv ...string) []string {
	out := slices.Clone(base)
	for _, s := range kv {
		k, _, _ := strings.Cut(s, "=")
		out = slices.DeleteFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if !strings.HasSuffix(s, "=<unset>") {
			out = append(out, s)
		}
	}
	return out
}

func unset(base []string, names ...string) []string {
	var kv []string
	for _, n := range names {
		kv = append(kv, n+"=<unset>")
	}
	return with(base, kv...)
}

// want is what a detection must find; master "" with pmi for PMI.
type want struct {
	engine                         Engine
	rank, world, local, localWorld int
	node, nnodes                   int
	addr, port                     string
	pmi                            bool
}

func TestDetect(t *testing.T) {
	ompi := []string{"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_RANK=2",
		"OMPI_COMM_WORLD_LOCAL_SIZE=3", "OMPI_COMM_WORLD_NODE_RANK=2", "OMPI_MCA_ess_base_jobid=298385409"}
	hydra := []string{"PMI_RANK=1", "PMI_SIZE=2", "PMI_FD=6", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2"}
	// The training operator's PyTorchJob worker-0 of a 2-replica job
	// (master + 1 worker): RANK is the pod index.
	pytorchJob := []string{"MASTER_ADDR=job-master-0", "MASTER_PORT=23456", "WORLD_SIZE=2", "RANK=1",
		"PET_NPROC_PER_NODE=1", "PET_NODE_RANK=1", "PET_NNODES=2", "PYTHONUNBUFFERED=0"}
	trainJob := []string{"PET_NNODES=2", "PET_NPROC_PER_NODE=1", "PET_NODE_RANK=1",
		"PET_MASTER_ADDR=job-node-0-0.job", "PET_MASTER_PORT=29400"}
	torchrun := []string{"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=1",
		"GROUP_WORLD_SIZE=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500"}
	for _, tc := range []struct {
		name string
		env  []string
		want want
		err  string // substring of the error; "" for none
	}{
		{"nothing", nil, want{engine: None, world: 1, localWorld: 1, nnodes: 1}, ""},
		{"torchrun", torchrun, want{Torchrun, 3, 4, 1, 2, 1, 2, "10.0.0.1", "29500", false}, ""},
		{"torchrun inside a slurm step", append(slices.Clone(slurmStep), torchrun...), want{Torchrun, 3, 4, 1, 2, 1, 2, "10.0.0.1", "29500", false}, ""},
		{"torchrun without RANK", unset(torchrun, "RANK"), want{}, "WORLD_SIZE=4 set but RANK not"},
		{"torchrun without master", unset(torchrun, "MASTER_ADDR", "MASTER_PORT"), want{}, "MASTER_ADDR and MASTER_PORT are not set"},
		{"torchrun without port", unset(torchrun, "MASTER_PORT"), want{}, "MASTER_PORT is not set (MASTER_ADDR=10.0.0.1"},
		{"torchrun rank outside", with(torchrun, "RANK=4"), want{}, "rank 4 is outside world size 4"},
		{"torchrun bad rank", with(torchrun, "RANK=x"), want{}, `RANK="x" is not a non-negative integer`},
		{"torchrun bad port", with(torchrun, "MASTER_PORT=70000"), want{}, `master port "70000"`},

		{"slurm step", slurmStep, want{Slurm, 4, 7, 1, 2, 1, 3, "gnode01", "15000" + "", false}, ""},
		{"slurm step master port", with(slurmStep, "MASTER_PORT=4000"), want{Slurm, 4, 7, 1, 2, 1, 3, "gnode01", "4000", false}, ""},
		{"slurm step master addr", with(slurmStep, "MASTER_ADDR=10.1.1.1"), want{Slurm, 4, 7, 1, 2, 1, 3, "10.1.1.1", "18456", false}, ""},
		{"slurm job nodelist only", unset(slurmStep, "SLURM_STEP_NODELIST"), want{}, "SLURM_JOB_NODELIST=gnode[01-04,07] names 5 hosts, SLURM_NNODES=3"},
		{"slurm job tasks per node", with(unset(slurmStep, "SLURM_STEP_TASKS_PER_NODE"), "SLURM_TASKS_PER_NODE=3,2(x2)"), want{Slurm, 4, 7, 1, 2, 1, 3, "gnode01", "18456", false}, ""},
		{"slurm no nodelist", unset(slurmStep, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"), want{}, "cannot tell rank 0's host"},
		{"slurm no procid", unset(slurmStep, "SLURM_PROCID"), want{}, "a Slurm step without SLURM_PROCID"},
		{"slurm no ntasks or localid", unset(slurmStep, "SLURM_NTASKS", "SLURM_LOCALID"), want{}, "without SLURM_NTASKS, SLURM_LOCALID"},
		{"slurm tasks do not add up", with(slurmStep, "SLURM_NTASKS=8"), want{}, "adds up to 7 tasks, SLURM_NTASKS=8"},
		{"slurm tasks per node count", with(slurmStep, "SLURM_STEP_TASKS_PER_NODE=3,4"), want{}, "names 2 nodes, SLURM_NNODES=3"},
		{"slurm bad tasks per node", with(slurmStep, "SLURM_STEP_TASKS_PER_NODE=3(2)"), want{}, "bad repetition"},
		{"slurm bad nodelist", with(slurmStep, "SLURM_STEP_NODELIST=gnode[01-02"), want{}, "unbalanced '['"},
		{"slurm node outside", with(slurmStep, "SLURM_NODEID=3"), want{}, "SLURM_NODEID=3 is outside SLURM_NNODES=3"},
		{"slurm local rank outside", with(slurmStep, "SLURM_LOCALID=2"), want{}, "local rank 2 is outside local world size 2"},
		{"slurm rank exported once for every task", with(slurmStep, "RANK=0", "WORLD_SIZE=7"), want{}, "RANK=0 contradicts SLURM_PROCID=4"},
		{"slurm rank agrees", with(slurmStep, "RANK=4", "WORLD_SIZE=7"), want{Slurm, 4, 7, 1, 2, 1, 3, "gnode01", "18456", false}, ""},
		{"slurm world contradicts", with(slurmStep, "RANK=4", "WORLD_SIZE=2"), want{}, "WORLD_SIZE=2 contradicts SLURM_NTASKS=7"},
		{"slurm batch script of 4 tasks", []string{"SLURM_JOB_ID=9", "SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_LOCALID=0"}, want{}, "start the workers with srun"},
		{"slurm batch script of 1 task", []string{"SLURM_JOB_ID=9", "SLURM_PROCID=0", "SLURM_NTASKS=1"}, want{engine: None, world: 1, localWorld: 1, nnodes: 1}, ""},
		{"slurm batch script with RANK", []string{"SLURM_JOB_ID=9", "SLURM_PROCID=0", "SLURM_NTASKS=4", "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1"},
			want{Static, 1, 2, 0, 2, -1, 1, "h", "1", false}, ""},
		{"slurm one node", []string{"SLURM_JOB_ID=2", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1", "SLURM_NODEID=0",
			"SLURM_NNODES=1", "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_STEP_NODELIST=vm"}, want{Slurm, 1, 2, 1, 2, 0, 1, "vm", "15002", false}, ""},

		{"open mpi one node", ompi, want{OpenMPI, 2, 3, 2, 3, -1, 1, "127.0.0.1", "20409", false}, ""},
		{"open mpi master", with(ompi, "MASTER_ADDR=n0", "MASTER_PORT=7000"), want{OpenMPI, 2, 3, 2, 3, -1, 1, "n0", "7000", false}, ""},
		{"open mpi two nodes no master", with(ompi, "OMPI_COMM_WORLD_SIZE=6"), want{}, "pass rank 0's host with mpirun -x MASTER_ADDR"},
		{"open mpi two nodes", with(ompi, "OMPI_COMM_WORLD_SIZE=6", "MASTER_ADDR=n0"), want{OpenMPI, 2, 6, 2, 3, -1, 2, "n0", "20409", false}, ""},
		{"open mpi no size", unset(ompi, "OMPI_COMM_WORLD_SIZE"), want{}, "OMPI_COMM_WORLD_SIZE is not set"},
		{"open mpi no local size", unset(ompi, "OMPI_COMM_WORLD_LOCAL_SIZE"), want{}, "OMPI_COMM_WORLD_LOCAL_SIZE is not set"},
		{"open mpi contradicts RANK", with(ompi, "RANK=0"), want{}, "RANK=0 contradicts OMPI_COMM_WORLD_RANK=2"},
		{"open mpi no jobid", unset(ompi, "OMPI_MCA_ess_base_jobid"), want{OpenMPI, 2, 3, 2, 3, -1, 1, "127.0.0.1", "29500", false}, ""},

		{"hydra", hydra, want{MPICH, 1, 2, 1, 2, -1, 1, "", "", true}, ""},
		{"hydra port", with(unset(hydra, "PMI_FD"), "PMI_PORT=h:1234", "PMI_ID=1"), want{MPICH, 1, 2, 1, 2, -1, 1, "", "", true}, ""},
		{"hydra port without id", with(unset(hydra, "PMI_FD"), "PMI_PORT=h:1234"), want{}, "PMI_PORT is set without PMI_ID"},
		{"hydra master addr", with(hydra, "MASTER_ADDR=n0"), want{MPICH, 1, 2, 1, 2, -1, 1, "n0", "29500", false}, ""},
		{"hydra no size", unset(hydra, "PMI_SIZE"), want{}, "PMI_RANK=1 set but PMI_SIZE not"},
		{"intel mpi two nodes without pmi", with(unset(hydra, "PMI_FD"), "PMI_SIZE=4"), want{}, "neither PMI_FD nor PMI_PORT"},
		{"hydra local size missing", unset(hydra, "MPI_LOCALNRANKS"), want{}, "MPI_LOCALNRANKS is not set"},

		{"trainjob", trainJob, want{TrainJob, 1, 2, 0, 1, 1, 2, "job-node-0-0.job", "29400", false}, ""},
		{"trainjob one node", []string{"PET_NNODES=1", "PET_NPROC_PER_NODE=1", "PET_NODE_RANK=0"}, want{TrainJob, 0, 1, 0, 1, 0, 1, "", "", false}, ""},
		{"trainjob auto on one cpu", with(trainJob, "PET_NPROC_PER_NODE=auto"), want{TrainJob, 1, 2, 0, 1, 1, 2, "job-node-0-0.job", "29400", false}, ""},
		{"trainjob two per node started directly", with(trainJob, "PET_NPROC_PER_NODE=2"), want{}, "start the program with `gotrain run PROGRAM`"},
		{"trainjob no master", unset(trainJob, "PET_MASTER_ADDR"), want{}, "PET_MASTER_ADDR is not set"},
		{"trainjob no nnodes", unset(trainJob, "PET_NNODES"), want{}, "PET_NODE_RANK=1 set but PET_NNODES not"},
		{"trainjob node outside", with(trainJob, "PET_NODE_RANK=2"), want{}, "rank 2 is outside world size 2"},
		{"trainjob bad nproc", with(trainJob, "PET_NPROC_PER_NODE=gpu"), want{}, `PET_NPROC_PER_NODE="gpu"`},

		{"pytorchjob", pytorchJob, want{PyTorchJob, 1, 2, 0, 1, 1, 2, "job-master-0", "23456", false}, ""},
		{"pytorchjob before PET_ variables", unset(pytorchJob, "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_NNODES"), want{Static, 1, 2, 0, 2, -1, 1, "job-master-0", "23456", false}, ""},
		{"pytorchjob two per pod started directly", with(pytorchJob, "PET_NPROC_PER_NODE=2", "WORLD_SIZE=4"), want{}, "PET_NPROC_PER_NODE=2 workers per node"},
		{"pytorchjob node rank contradicts", with(pytorchJob, "PET_NODE_RANK=0"), want{}, "PET_NODE_RANK=0 contradicts RANK=1"},
		{"pytorchjob world contradicts", with(pytorchJob, "PET_NNODES=3"), want{}, "WORLD_SIZE=2 contradicts PET_NNODES=3"},
		{"pytorchjob no master", unset(pytorchJob, "MASTER_ADDR"), want{}, "MASTER_ADDR is not set"},

		{"static", []string{"RANK=0", "WORLD_SIZE=1"}, want{Static, 0, 1, 0, 1, -1, 1, "", "", false}, ""},
		{"static world without rank", []string{"WORLD_SIZE=2"}, want{}, "WORLD_SIZE=2 set but RANK not"},
		{"static no master", []string{"RANK=0", "WORLD_SIZE=2"}, want{}, "MASTER_ADDR and MASTER_PORT are not set (world size 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := detect(envOf(tc.env...), func() int { return 1 })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrEnv) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				if e.Engine == "" {
					t.Errorf("no engine named with the error %v", err)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{e.Engine, e.Rank, e.WorldSize, e.LocalRank, e.LocalWorldSize, e.NodeRank, e.NNodes, e.MasterAddr, e.MasterPort, e.PMI}
			if tc.want.port == "15000" { // the derived port of job 123456
				tc.want.port = "18456"
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			for _, v := range e.Vars {
				if !slices.Contains(tc.env, v.Name+"="+v.Value) {
					t.Errorf("Vars has %s=%s, not in the environment", v.Name, v.Value)
				}
			}
		})
	}
}

func TestVarsNameWhatWasRead(t *testing.T) {
	e, err := detect(envOf(slurmStep...), func() int { return 1 })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range e.Vars {
		names = append(names, v.Name)
	}
	for _, n := range []string{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE", "SLURM_JOB_ID"} {
		if !slices.Contains(names, n) {
			t.Errorf("Vars %v lacks %s", names, n)
		}
	}
	if slices.Contains(names, "SLURM_JOB_NODELIST") {
		t.Errorf("Vars %v names SLURM_JOB_NODELIST, which the step's list made unneeded", names)
	}
	if e.JobID != "slurm-123456.0" || !strings.Contains(e.MasterFrom, "SLURM_STEP_NODELIST") {
		t.Errorf("JobID %q, MasterFrom %q", e.JobID, e.MasterFrom)
	}
}

func TestParseNodeList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  string
	}{
		{"gnode[01-04,07]", "gnode01 gnode02 gnode03 gnode04 gnode07", ""},
		{"vm", "vm", ""},
		{"a,b[1-2],c", "a b1 b2 c", ""},
		{"r[1-2]n[08-09]", "r1n08 r1n09 r2n08 r2n09", ""},
		{"n[9-11]", "n9 n10 n11", ""},
		{"n[098-101]", "n098 n099 n100 n101", ""},
		{"node-[1-2].cluster", "node-1.cluster node-2.cluster", ""},
		{"", "", "empty node list"},
		{"n[1-", "", "unbalanced '['"},
		{"n1]", "", "unbalanced ']'"},
		{"n[3-1]", "", `bad range "3-1"`},
		{"n[a-b]", "", `bad range "a-b"`},
		{"n[1,,2]", "", `bad range ""`},
		{"a,,b", "", "empty host name"},
		{"n[0-99999999]", "", "expands to more than"},
	} {
		got, err := ParseNodeList(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseNodeList(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("ParseNodeList(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"2(x3),1", "[2 2 2 1]", ""},
		{"4", "[4]", ""},
		{"1,2,3", "[1 2 3]", ""},
		{"", "", "empty"},
		{"2(3)", "", "bad repetition"},
		{"2(x0)", "", "bad entry"},
		{"x", "", "bad entry"},
		{"2(x99999999)", "", "more than"},
	} {
		got, err := ParseTasksPerNode(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTasksPerNode(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("ParseTasksPerNode(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestCPUs(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, errors.New("no such file")
		}
	}
	for _, tc := range []struct {
		files map[string]string
		want  int
	}{
		{map[string]string{"/sys/fs/cgroup/cpu.max": "max 100000\n"}, 8},
		{map[string]string{"/sys/fs/cgroup/cpu.max": "200000 100000\n"}, 2},
		{map[string]string{"/sys/fs/cgroup/cpu.max": "150000 100000\n"}, 2},
		{map[string]string{"/sys/fs/cgroup/cpu.max": "50000 100000\n"}, 1},
		{map[string]string{"/sys/fs/cgroup/cpu.max": "1600000 100000\n"}, 8},
		{map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "300000\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 3},
		{map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"}, 8},
		{nil, 8},
	} {
		if got := cpusFrom(8, files(tc.files)); got != tc.want {
			t.Errorf("cpusFrom(8, %v) = %d, want %d", tc.files, got, tc.want)
		}
	}
}
