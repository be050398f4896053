//! sky-laya.
