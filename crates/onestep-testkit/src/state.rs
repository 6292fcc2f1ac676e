//! Cursor stores for fault tests.

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use onestep_core::state::{CursorStore, InMemoryCursorStore};
use onestep_core::{Error, Result};
use serde_json::Value;

/// An in-memory [`CursorStore`] whose saves fail while it is down (a database restarting), to
/// test what a source does when its position cannot be saved.
#[derive(Debug, Default)]
pub struct FlakyCursorStore {
    down: AtomicBool,
    inner: InMemoryCursorStore,
}

impl FlakyCursorStore {
    /// Makes saves fail (`true`) or succeed again (`false`).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }
}

#[async_trait]
impl CursorStore for FlakyCursorStore {
    async fn load(&self, key: &str) -> Result<Option<Value>> {
        self.inner.load(key).await
    }

    async fn save(&self, key: &str, cursor: Value) -> Result<()> {
        if self.down.load(Ordering::SeqCst) {
            return Err(Error::invalid("cursor", "the store is down"));
        }
        self.inner.save(key, cursor).await
    }
}
