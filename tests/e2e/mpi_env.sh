# Sourced by tests/e2e/mpirun.sh (every launch) and tests/e2e/run.sh (for
# the programs the scripts start without mpirun, which Open MPI runs as
# singletons): Open MPI kept to the shared-memory and self transports,
# hwloc to the cores, ranks that wait yielding the core. Values set
# beforehand are kept. The tests' environment only: a program run by
# hand keeps Open MPI's defaults.
if [ "$(id -u)" -eq 0 ]; then
	# Open MPI refuses to run as root without both of these
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
# containers often lack a usable high-speed network stack: skip its probes
export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_mpi_warn_on_fork=0
# A rank waiting in MPI yields the core (sched_yield between polls):
# Open MPI does so only where a host has more ranks than cores, and the
# suite's two-rank jobs on 2 cores busy-polled beside the other scripts'
# jobs. Side by side on the shared 2-core host (equivalence ms_ops
# pipeline training, 4 rounds alternating): 454 -> 422 s of CPU (user
# 226 -> 192 s, system the same), 549 -> 375 s of wall time.
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
# Every process Open MPI starts (mpirun and each rank) has hwloc map the
# machine, PCI devices and GPUs included (their sysfs files, OpenCL and
# X11 loaded as plugins), which the shared-memory transport never reads:
# the cores alone here. A 4-rank MPI_Init + MPI_Finalize: 0.35 -> 0.25 s
# of CPU (6 runs each, shared 2-core host).
export HWLOC_COMPONENTS="${HWLOC_COMPONENTS:--pci,-linuxio,-opencl,-cuda,-nvml,-rsmi,-levelzero,-gl}"
export HWLOC_PLUGINS_BLACKLIST="${HWLOC_PLUGINS_BLACKLIST:-hwloc_gl,hwloc_opencl,hwloc_pci}"
# A program started without mpirun (a singleton) starts no orted, Open
# MPI's daemon, beside it: it would serve MPI_Comm_spawn, which netc's
# runtime never calls. With the settings above, the singleton's MPI_Init
# + MPI_Finalize: 0.066 -> 0.028 s of CPU, 0.64 -> 0.13 s of wall time
# (10 runs each, shared 2-core host); mpirun's ranks are not singletons.
export OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}"
