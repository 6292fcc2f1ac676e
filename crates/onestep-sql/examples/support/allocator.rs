//! The bench examples' global allocator: jemalloc, the one the `onestep` binary ships
//! (`crates/onestep-cli/src/main.rs`), so `cargo xtask bench` measures the worker a user runs
//! with `onestep run`. An application that embeds the crates picks its own allocator; with glibc's
//! the worker spends ~20 % more CPU per execution (`docs/benchmarks.md`, "What was done").
//! Shared by the burndown and ceiling examples (`#[path]`), the ceilings included, so both sides
//! of a ratio run on the same allocator.

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
