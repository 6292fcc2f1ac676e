//! The stock `onestep` binary: the built-in handlers and resource types.

/// jemalloc, with its background threads, hands freed memory back to the system within seconds,
/// so a server's footprint returns near its baseline after a burst of connections (glibc's
/// allocator keeps most of it: measured in `tests/http_hostile/slow.rs`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    onestep_cli::Cli::new().run()
}
