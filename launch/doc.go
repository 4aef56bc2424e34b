// Package launch starts, watches and restarts the worker processes of a
// distributed job on one node: gotrain's equivalent of torchrun, behind
// `gotrain run`.
//
// The launcher knows nothing of collectives or training (it does not import
// dist): it runs any
// program NProcPerNode times and hands each copy its place in the job
// through the environment, with torchrun's variable names (RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ...), so gotrain's env:// init,
// a PyTorch script or a shell one-liner all find their rank the same way.
// GOTRAIN_TOKEN carries the secret with which the workers authenticate each
// other; GOTRAIN_NUM_THREADS and OMP_NUM_THREADS share the CPUs among the
// workers.
//
// Each worker runs in its own process group, so a stop reaches the
// worker's children too; a reaper process (a copy of the launcher's
// executable) stops the groups if the launcher itself is killed, even by
// SIGKILL, so no worker or child of one outlives it for long. A closed
// stdout (`gotrain run ... | head -1`) drops the workers' lines to it and
// does not stop the job. Its output lines reach the console prefixed with
// "[rank<N>]: ", whole lines at a time, and with LogDir to files, as
// Config.Redirects, Config.Tee and Config.LocalRanksFilter choose (torchrun's
// --redirects, --tee and --local-ranks-filter). With Config.Events, each
// worker also gets a pipe for progress events (descriptor 3, named by
// GOTRAIN_EVENTS_FD; see package progress), so that the launcher alone
// draws on the terminal. When a worker fails, the launcher stops the others
// (SIGTERM, then SIGKILL after a grace period) and either restarts all of
// them with GOTRAIN_RESTART_COUNT one higher (a program that resumes from
// its last checkpoint carries on) or reports the root cause, a Failure
// naming the worker, its host, its exit status and the last lines of its
// stderr, and exits with that worker's exit code. The root cause is the
// first rank that failed on its own (an error, a signal, a stop), not the
// ranks that failed because of it: gotrain's workers exit with
// event.ExitPeer when only a peer's failure failed them, naming the peer,
// and the launcher waits up to the stop timeout for the failure itself.
//
// # One node
//
//	gotrain run --nproc-per-node 4 ./mytrainer --epochs 5
//	gotrain run --standalone --nproc-per-node auto -- sh -c 'echo $RANK of $WORLD_SIZE'
//
// # Several nodes
//
// Rendezvous is static, as torchrun's with --node-rank: every node runs a
// launcher with the same --nnodes, --nproc-per-node, --master-addr (an
// address of node 0 the others can reach), --master-port and GOTRAIN_TOKEN,
// and its own --node-rank. Each launcher computes its workers' global ranks
// as node_rank·nproc_per_node + local_rank; rank 0, on node 0, serves the
// rendezvous store on master-addr:master-port. For two nodes by hand:
//
//	export GOTRAIN_TOKEN=$(openssl rand -hex 32)   # the same on both nodes
//	# on node 0 (10.0.0.1):
//	gotrain run --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 10.0.0.1 ./mytrainer
//	# on node 1:
//	gotrain run --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.0.0.1 ./mytrainer
//
// or from node 0, starting node 1 over SSH, with the token sent on ssh's
// standard input so that it shows on no command line:
//
//	echo "$GOTRAIN_TOKEN" | ssh 10.0.0.2 'read -r GOTRAIN_TOKEN && export GOTRAIN_TOKEN &&
//	    exec gotrain run --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.0.0.1 ./mytrainer' &
//	gotrain run --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 10.0.0.1 ./mytrainer
//
// A multi-node job refuses to start without GOTRAIN_TOKEN: each node would
// otherwise draw its own and no worker could join another node's. Restarts
// are per node: a failure on one node makes its peers' workers fail at their
// next collective (the process group reports dead peers), so every node's
// launcher restarts, and all of them must be given the same --max-restarts.
//
// # Elastic jobs
//
// With Config.Rendezvous (gotrain run --nnodes MIN:MAX --rdzv-endpoint
// HOST:PORT --rdzv-id ID) the nodes meet in rounds of package rendezvous
// instead: each round gives this node its node rank, the group's size and
// node rank 0's address, and the workers run with them; when a node is
// lost or arrives, or a worker fails, every node stops its workers and
// the live ones re-form a group of the new size. Only failures count
// against MaxRestarts, and the count is the group's. A program that
// resumes from its checkpoint carries on in the new world (see
// elastic.go).
package launch
