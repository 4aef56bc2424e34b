#!/bin/sh
# Train the MNIST example on 3 workers under an MPI launcher; gotrain
# links no MPI library and needs no MASTER_ADDR on one node.
#
#   CGO_ENABLED=0 go build -o mnist-example ./examples/mnist
#   examples/mpi/run-mnist.sh                       # Open MPI's mpirun
#   LAUNCHER=mpiexec.hydra examples/mpi/run-mnist.sh  # MPICH
set -eu
GOTRAIN_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export GOTRAIN_TOKEN GOTRAIN_NUM_THREADS=1
case "${LAUNCHER:-mpirun}" in
mpiexec.hydra | mpiexec.mpich | mpiexec)
  # Hydra passes the whole environment on; rank 0's address goes
  # through its PMI key-value service.
  exec "${LAUNCHER:-mpiexec}" -n 3 ./mnist-example "$@"
  ;;
*)
  # Open MPI: -x passes variables on to other nodes. Across nodes add
  # -x MASTER_ADDR=<rank 0's host>.
  exec "${LAUNCHER:-mpirun}" -np 3 -x GOTRAIN_TOKEN -x GOTRAIN_NUM_THREADS ./mnist-example "$@"
  ;;
esac
