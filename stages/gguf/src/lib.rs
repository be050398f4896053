//! sky-gguf.
