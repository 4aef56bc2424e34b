#!/usr/bin/env bash
# The cluster engines the tests run gotrain's workers under: Slurm (with
# munge), Open MPI and MPICH, side by side (mpirun.openmpi, mpiexec.hydra),
# and etcd for the elastic rendezvous (the test starts its own server on
# loopback with a temporary data directory).
# Installs only what is missing, so a second run costs nothing. It starts
# no daemon and writes no configuration: the Slurm test starts munged,
# slurmctld and slurmd itself, with its own configuration in a temporary
# directory on free ports, and stops them by PID when it ends. The package
# scripts may start the distribution's own munged/slurm daemons; they are
# stopped here so the machine is left as it was, with nothing listening.
set -euo pipefail
missing=""
command -v munged >/dev/null || missing="$missing munge"
command -v slurmctld >/dev/null || missing="$missing slurmctld"
command -v slurmd >/dev/null || missing="$missing slurmd"
command -v srun >/dev/null || missing="$missing slurm-client"
command -v mpirun.openmpi >/dev/null || missing="$missing openmpi-bin"
command -v mpiexec.hydra >/dev/null || missing="$missing mpich"
command -v etcd >/dev/null || missing="$missing etcd-server"
if [ -n "$missing" ]; then
  apt-get update
  # policy-rc.d: no service starts during the install.
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing || { rm -f /usr/sbin/policy-rc.d; exit 1; }
  rm -f /usr/sbin/policy-rc.d
fi
# Open MPI installs the mpirun alternative; MPICH's launcher is
# mpiexec.hydra. Both must be there.
dpkg-query -W -f '${Package} ${Version}\n' slurmctld slurmd slurm-client munge openmpi-bin mpich etcd-server
