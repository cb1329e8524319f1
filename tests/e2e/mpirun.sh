#!/bin/sh
# Runs an MPI program quietly on one machine, as root or not:
#   tests/e2e/mpirun.sh -np N prog args...
# Oversubscribes (tests use more ranks than cores) and keeps Open MPI to the
# shared-memory and self transports, so no network probing or warnings.
#
# Each launch gets a session directory of its own. Open MPI 4.1 puts every
# job's under one shared $TMPDIR/ompi.HOST.UID, which the last job out
# removes; when two jobs start while it is missing, one's mkdir finds it
# made by the other ("A call to mkdir was unable to create the desired
# directory ... File exists", orte_init failed) and the launch fails
# before the program runs: the e2e suite's occasional start-up failures
# under parallel load (8 lanes of concurrent launches: 1 in ~1,800 failed
# so, 0 in 800 with a directory each). The directory is made under
# OMPI_MCA_orte_tmpdir_base when set (tests/e2e/run.sh gives each script
# one and removes it after), else $TMPDIR or /tmp, where empty ones left
# by earlier launches are removed. mpirun is exec'd (tests find the ranks
# as its children), so nothing runs after it here to remove its own.
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
# A rank waiting in MPI yields the core (sched_yield between polls):
# Open MPI does so only where a host has more ranks than cores, and the
# suite's two-rank jobs on 2 cores busy-polled beside the other scripts'
# jobs. The tests' environment only: a program run by hand keeps Open
# MPI's default. Side by side on the shared 2-core host (equivalence
# ms_ops pipeline training, 4 rounds alternating): 454 -> 422 s of CPU
# (user 226 -> 192 s, system the same), 549 -> 375 s of wall time.
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
# Every process Open MPI starts (mpirun and each rank) has hwloc map the
# machine, PCI devices and GPUs included (their sysfs files, OpenCL and
# X11 loaded as plugins), which the shared-memory transport never reads:
# the cores alone here. A 4-rank MPI_Init + MPI_Finalize: 0.35 -> 0.25 s
# of CPU (6 runs each, shared 2-core host). The tests' environment only.
export HWLOC_COMPONENTS="${HWLOC_COMPONENTS:--pci,-linuxio,-opencl,-cuda,-nvml,-rsmi,-levelzero,-gl}"
export HWLOC_PLUGINS_BLACKLIST="${HWLOC_PLUGINS_BLACKLIST:-hwloc_gl,hwloc_opencl,hwloc_pci}"
parent=${OMPI_MCA_orte_tmpdir_base:-${TMPDIR:-/tmp}}
# empty ones over a minute old: a launch fills its own within a second
# (a job killed leaves its files: those stay, as Open MPI's own would)
find "$parent" -mindepth 1 -maxdepth 1 -type d -name 'netc-mpi.*' -empty -mmin +1 -exec rmdir {} + 2>/dev/null || true
OMPI_MCA_orte_tmpdir_base=$(mktemp -d "$parent/netc-mpi.XXXXXX")
export OMPI_MCA_orte_tmpdir_base
exec mpirun --oversubscribe "$@"
