//! The Rust snippets of `README.md` and `docs/*.md`, one module per ```` ```rust ```` block (named
//! after its file and line), compiled with the workspace: a snippet that no longer matches the
//! API fails `cargo clippy` and `cargo test`. Mark a block ```` ```rust,ignore ```` (or use
//! another language tag) for text that is not meant to compile.
#![allow(warnings, clippy::all, clippy::pedantic, clippy::restriction)]

include!(concat!(env!("OUT_DIR"), "/snippets.rs"));
