#!/bin/sh
# Here, where there is no GPU: builds what the GPU machine runs and packs it
# into one archive, .gpu-pack.tar.xz (git-ignored), for the device run to
# carry beside the working tree (docs/cuda.md, "The GPU test suite"):
#   - a portable build (NETC_ARCH= : the default -march=native is this
#     machine's CPU, which the GPU machine's need not have) in
#     build/portable, packed as build/: netc, netc-calibrate and
#     netc-calibrate-cuda (calib_check.sh), lib/ (libnetrt.a,
#     libnetrt_cuda.a), include/, tests/gpu/kernels_check;
#   - .gpu-deps (tests/gpu/carry_mpi.sh makes it when missing): Open MPI,
#     OpenBLAS and the other shared libraries that machine lacks.
# As plain files they pass the 64 MiB a device run may carry; xz brings
# them to about 11 MB, unpacked there in seconds. Then, on the GPU machine:
#   tests/gpu/remote.sh       (unpacks it, runs tests/gpu/run.sh and the
#                              benchmarks, logs under $OUT)
#   tests/gpu/pack.sh         (re)builds and packs; prints the archive's size
set -e
cd "$(dirname "$0")/../.."
P=build/portable
nice make -j2 B=$P NETC_ARCH= all $P/tests/gpu/kernels_check
[ -x $P/tests/gpu/kernels_check ] && [ -e $P/lib/libnetrt_cuda.a ] ||
	{ echo "pack: no CUDA runtime in $P (nvcc missing?)" >&2; exit 1; }
[ -d .gpu-deps/root ] || tests/gpu/carry_mpi.sh
tar -cJf .gpu-pack.tar.xz --transform "s|^$P|build|" \
	$P/netc $P/netc-calibrate $P/netc-calibrate-cuda $P/lib/libnetrt.a $P/lib/libnetrt_cuda.a $P/include $P/tests/gpu/kernels_check .gpu-deps
du -h .gpu-pack.tar.xz
