//! The stock `onestep` binary: the built-in handlers and resource types.

fn main() -> std::process::ExitCode {
    onestep_cli::Cli::new().run()
}
