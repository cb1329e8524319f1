#!/bin/sh
# Prepares what the GPU machine lacks, to be carried there beside the
# working tree (docs/cuda.md): that machine has the CUDA toolkit but none
# of the Debian packages netc and its programs need at run time (Open MPI,
# OpenBLAS, GraphViz's and protobuf-c's shared libraries). This downloads
# them with `apt-get download` (no installation) and unpacks them with
# `dpkg -x` into .gpu-deps/root (git-ignored); tests/gpu/run.sh points
# PATH, LD_LIBRARY_PATH, LIBRARY_PATH and OPAL_PREFIX there.
#   tests/gpu/carry_mpi.sh        (re)creates .gpu-deps, prints its size
# Base libraries every Debian 12 image has (libc6, libstdc++6, zlib1g,
# libgcc-s1, ...) are not included.
set -e
cd "$(dirname "$0")/../.."
DEPS=.gpu-deps
# Open MPI's network transports (UCX, libfabric, PSM, verbs) are left out:
# tests run on one host over shared memory, and the plugins that need them
# are skipped quietly (run.sh sets mca_base_component_show_load_errors=0).
# That keeps the folder under the 64 MiB a device run may carry.
PKGS="openmpi-bin openmpi-common libopenmpi3 libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7
      libevent-2.1-7 libhwloc15 libnuma1 libltdl7 libgfortran5 libquadmath0
      libopenblas0 libopenblas0-pthread
      libgvc6 libcgraph6 libcdt5 libpathplan4 libprotobuf-c1 libexpat1 libxdot4"
rm -rf "$DEPS"
mkdir -p "$DEPS/debs" "$DEPS/root"
cd "$DEPS/debs"
# apt-get download refuses a list with one unknown name: one at a time,
# reporting (not failing on) a package this Debian does not have
for p in $PKGS; do
	apt-get download -q "$p" >/dev/null 2>&1 || echo "carry_mpi: cannot download $p (skipped)" >&2
done
for d in *.deb; do
	dpkg -x "$d" ../root
done
cd ../root
# the unversioned names the linker looks for (the -dev packages' symlinks),
# so programs can be linked there as well as run
L=usr/lib/x86_64-linux-gnu
[ -e $L/openmpi/lib/libmpi.so ] || ln -s libmpi.so.40 $L/openmpi/lib/libmpi.so
ob=$(ls $L/openblas-pthread/libopenblas.so.0 2>/dev/null || true)
[ -z "$ob" ] || [ -e $L/openblas-pthread/libopenblas.so ] || ln -s libopenblas.so.0 $L/openblas-pthread/libopenblas.so
# Debian names these through update-alternatives, which dpkg -x does not run
ln -sf mpirun.openmpi usr/bin/mpirun
ln -sf mpirun.openmpi usr/bin/mpiexec
rm -rf usr/share/doc usr/share/man usr/share/lintian usr/lib/jvm
# what the tests never load: the reference BLAS/LAPACK beside OpenBLAS,
# Java, OpenSHMEM and Fortran bindings
rm -f $L/openblas-pthread/libblas.so.3 $L/openblas-pthread/liblapack.so.3 $L/libmpi_java* \
      $L/liboshmem* $L/libmpi_mpifh* $L/libmpi_usempi* $L/openmpi/lib/*java* $L/openmpi/lib/liboshmem*
cd ../..
rm -rf "$DEPS/debs"
du -sh "$DEPS"
