//! sky-quant.
