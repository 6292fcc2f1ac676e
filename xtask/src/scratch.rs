//! A private temporary directory for a test run, so that what the tests leave behind can be
//! seen: `cargo test` runs with `TMPDIR` pointing here, and whatever is still in it afterwards is
//! a test that did not clean up after itself (pass or fail), which fails the run.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The directory; removed by [`Scratch::finish`] (and by `Drop`, if the run stopped early).
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Creates `onestep-test-<random>` in the system's temporary directory (outside the
    /// repository: some tests need a directory that is not inside a git work tree).
    pub fn new() -> Result<Self> {
        let path =
            std::env::temp_dir().join(format!("onestep-test-{}", crate::sys::random_hex(6)?));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("could not create {}", path.display()))?;
        Ok(Self { path })
    }

    /// The directory, for `TMPDIR`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory; fails, naming them, when the tests left anything in it.
    pub fn finish(self) -> Result<()> {
        let mut left: Vec<String> = std::fs::read_dir(&self.path)
            .with_context(|| format!("could not list {}", self.path.display()))?
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        if left.is_empty() {
            return Ok(());
        }
        let shown = left.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
        bail!(
            "the tests left {} entr{} in their temporary directory (a test must remove what it \
             creates, pass or fail): {shown}{}",
            left.len(),
            if left.len() == 1 { "y" } else { "ies" },
            if left.len() > 10 { ", …" } else { "" }
        )
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leftover_fails_the_run_and_an_empty_directory_passes() {
        let clean = Scratch::new().expect("created");
        let path = clean.path().to_path_buf();
        assert!(clean.finish().is_ok());
        assert!(!path.exists(), "finish removes the directory");

        let dirty = Scratch::new().expect("created");
        let path = dirty.path().to_path_buf();
        std::fs::create_dir(path.join("onestep-sqlite-tests-x")).expect("mkdir");
        let err = dirty.finish().expect_err("a leftover");
        assert!(
            err.to_string().contains("left 1 entry")
                && err.to_string().contains("onestep-sqlite-tests-x"),
            "{err}"
        );
        assert!(!path.exists(), "the directory is removed even then");
    }
}
