//! `libLiteRtCompilerPlugin_Vnpu.so`: the exported names of vnpu's LiteRT compiler plugin
//! (the bodies are `vnpu_delegate::plugin`'s).
#![allow(non_snake_case)]

vnpu_delegate::export_compiler_plugin!();
