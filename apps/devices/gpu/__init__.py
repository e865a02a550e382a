"""GPU targets: `triton` (Python modules with @triton.jit kernels) and `cuda` (CUDA C++ by nvcc).

Both run on the device worker of a CUDA host (queue `device.cuda`) through the same pipeline
as cpu-c: the reference runner makes inputs from fresh seeds, a confined child process
(harness.py) calls the candidate, and the judge in apps/devices/evaluator/judging.py compares
files. Without a CUDA device, `triton` checks correctness of small cases in Triton's
interpreter on the CPU (TRITON_INTERPRET=1) and is not timed; `cuda` reports itself
unavailable.
"""
