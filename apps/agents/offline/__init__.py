"""The offline search policy: named, parameterized source transformations of C kernels."""
