package clusterenv_test

import (
	"fmt"

	"github.com/gotrain/gotrain/distributed/clusterenv"
)

// A task of `srun -N 2 -n 4`: no MASTER_ADDR, yet rank 0's host and port
// follow from Slurm's variables.
func ExampleDetect() {
	env := map[string]string{
		"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "2", "SLURM_NTASKS": "4",
		"SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
		"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NODELIST": "gnode[07-08]",
	}
	e, err := clusterenv.Detect(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Engine, "rank", e.Rank, "of", e.WorldSize, "local", e.LocalRank, "of", e.LocalWorldSize)
	fmt.Println("master", e.MasterAddr+":"+e.MasterPort)
	// Output:
	// slurm rank 2 of 4 local 0 of 2
	// master gnode07:19242
}

func ExampleParseNodeList() {
	hosts, _ := clusterenv.ParseNodeList("gnode[01-04,07]")
	fmt.Println(hosts)
	// Output: [gnode01 gnode02 gnode03 gnode04 gnode07]
}
