#!/bin/sh
# Runs an MPI program quietly on one machine, as root or not:
#   tests/e2e/mpirun.sh -np N prog args...
# Oversubscribes (tests use more ranks than cores) and keeps Open MPI to the
# shared-memory and self transports, so no network probing or warnings.
set -e
if [ "$(id -u)" -eq 0 ]; then
	# Open MPI refuses to run as root without both of these
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
export OMPI_MCA_rmaps_base_oversubscribe=1
# containers often lack a usable high-speed network stack: skip its probes
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_mpi_warn_on_fork=0
exec mpirun --oversubscribe "$@"
