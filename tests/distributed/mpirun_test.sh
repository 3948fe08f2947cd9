#!/usr/bin/env bash
# usage: mpirun_test.sh N PROGRAM [ARGS...]
# Runs PROGRAM as N ranks on this host with Open MPI's mpirun (as root too, more ranks than
# cores allowed). Exits 77 (ctest's skip), saying why, when mpirun is missing.
set -u
n=$1; shift
mpirun=$(command -v mpirun || true)
if [ -z "$mpirun" ]; then
  echo "skipped: mpirun is missing (Debian's openmpi-bin; scripts/setup.sh installs it)"
  exit 77
fi
# Shared-memory transport without the single-copy (CMA) path, which containers often forbid.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
exec "$mpirun" --oversubscribe --allow-run-as-root -np "$n" "$@"
