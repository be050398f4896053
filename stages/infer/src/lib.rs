//! sky-infer.
