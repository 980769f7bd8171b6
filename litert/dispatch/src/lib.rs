//! `libLiteRtDispatch_Vnpu.so`: the one exported name of vnpu's LiteRT dispatch library
//! (the body is `vnpu_delegate::dispatch`'s).
#![allow(non_snake_case)]

vnpu_delegate::export_dispatch!();
