# Sourced by `make test`, `make test-chapter` and `make execute`: torch's AVX2 kernels on every x86-64 processor,
# also where it has AVX-512. The stored outputs of the notebooks come from trainings of hundreds of steps, and their
# last digits depend on the instruction set of the kernels (AVX-512 kernels add in another order): on an AVX-512
# machine, chapter 11a's heads and accuracies came out different from the stored ones. With AVX2 everywhere, every
# machine that has it reproduces the stored outputs bit for bit. `make bench` does not source this: it measures
# the machine as it is.
if [ "$(uname -m)" = x86_64 ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
  export ATEN_CPU_CAPABILITY=avx2      # torch's own vectorised kernels
  export MKL_ENABLE_INSTRUCTIONS=AVX2  # matrix multiplies (MKL)
  export ONEDNN_MAX_CPU_ISA=AVX2       # oneDNN, where torch calls it
fi
