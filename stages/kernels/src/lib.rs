//! sky-kernels.
