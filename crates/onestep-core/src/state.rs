//! Key-value state for tasks ([`StateStore`]) and source positions ([`CursorStore`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use crate::error::Result;

/// Durable key-value state shared by the tasks of an app (`ctx.state()`).
///
/// # Example
/// ```
/// use onestep_core::state::{InMemoryStateStore, StateStore};
/// # tokio_test_block_on(async {
/// let store = InMemoryStateStore::default();
/// store.save("counter", serde_json::json!(1)).await?;
/// assert_eq!(store.load("counter").await?, Some(serde_json::json!(1)));
/// # Ok::<(), onestep_core::Error>(())
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
#[async_trait]
pub trait StateStore: Send + Sync {
    /// The value under `key`, if any.
    async fn load(&self, key: &str) -> Result<Option<Value>>;
    /// Stores `value` under `key`, replacing what was there.
    async fn save(&self, key: &str, value: Value) -> Result<()>;
    /// Removes `key`; removing a missing key is not an error.
    async fn delete(&self, key: &str) -> Result<()>;
}

/// Remembers how far an incremental source has read.
///
/// # Example
/// ```
/// use onestep_core::state::{CursorStore, InMemoryCursorStore};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = InMemoryCursorStore::default();
/// store.save("orders", serde_json::json!({"id": 42})).await?;
/// assert_eq!(store.load("orders").await?, Some(serde_json::json!({"id": 42})));
/// # Ok::<(), onestep_core::Error>(())
/// # });
/// ```
#[async_trait]
pub trait CursorStore: Send + Sync {
    /// The cursor saved under `key`, if any.
    async fn load(&self, key: &str) -> Result<Option<Value>>;
    /// Saves the cursor under `key`.
    async fn save(&self, key: &str, cursor: Value) -> Result<()>;
}

/// A [`StateStore`] in process memory; lost when the process exits.
#[derive(Debug, Clone, Default)]
pub struct InMemoryStateStore {
    values: Arc<Mutex<HashMap<String, Value>>>,
}

#[async_trait]
impl StateStore for InMemoryStateStore {
    async fn load(&self, key: &str) -> Result<Option<Value>> {
        Ok(self
            .values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned())
    }

    async fn save(&self, key: &str, value: Value) -> Result<()> {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), value);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.values
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        Ok(())
    }
}

/// A [`CursorStore`] in process memory; lost when the process exits.
#[derive(Debug, Clone, Default)]
pub struct InMemoryCursorStore {
    inner: InMemoryStateStore,
}

#[async_trait]
impl CursorStore for InMemoryCursorStore {
    async fn load(&self, key: &str) -> Result<Option<Value>> {
        self.inner.load(key).await
    }

    async fn save(&self, key: &str, cursor: Value) -> Result<()> {
        self.inner.save(key, cursor).await
    }
}

/// A view of a [`StateStore`] whose keys are prefixed with a scope (`"<app>:<task>:"`).
#[derive(Clone)]
pub struct ScopedState {
    store: Arc<dyn StateStore>,
    /// Shared: every attempt of a task gets a view of the same scope, cloned.
    scope: Arc<str>,
}

impl ScopedState {
    /// A view of `store` under `scope`.
    pub fn new(store: Arc<dyn StateStore>, scope: impl Into<String>) -> Self {
        Self {
            store,
            scope: Arc::from(scope.into()),
        }
    }

    /// The scope prefix (without the trailing `:`).
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// A nested view under `<scope>:<name>`.
    pub fn child(&self, name: &str) -> Self {
        Self {
            store: self.store.clone(),
            scope: Arc::from(format!("{}:{name}", self.scope)),
        }
    }

    /// `<scope>:<key>`; an empty key is refused, as the reference refuses it.
    fn key(&self, key: &str) -> Result<String> {
        if key.is_empty() {
            return Err(crate::Error::invalid("key", "must not be empty"));
        }
        Ok(format!("{}:{key}", self.scope))
    }

    /// The value under `key` in this scope.
    pub async fn load(&self, key: &str) -> Result<Option<Value>> {
        self.store.load(&self.key(key)?).await
    }

    /// Stores `value` under `key` in this scope.
    pub async fn save(&self, key: &str, value: Value) -> Result<()> {
        self.store.save(&self.key(key)?, value).await
    }

    /// Removes `key` from this scope.
    pub async fn delete(&self, key: &str) -> Result<()> {
        self.store.delete(&self.key(key)?).await
    }
}

impl std::fmt::Debug for ScopedState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedState")
            .field("scope", &self.scope)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scoped_state_prefixes_keys_and_isolates_tasks() {
        let store: Arc<dyn StateStore> = Arc::new(InMemoryStateStore::default());
        let a = ScopedState::new(store.clone(), "app:a");
        let b = ScopedState::new(store.clone(), "app:b");
        a.save("n", Value::from(1)).await.unwrap();
        assert_eq!(b.load("n").await.unwrap(), None);
        assert_eq!(store.load("app:a:n").await.unwrap(), Some(Value::from(1)));
        a.delete("n").await.unwrap();
        assert_eq!(a.load("n").await.unwrap(), None);
        let err = a.save("", Value::from(1)).await.unwrap_err();
        assert_eq!(err.to_string(), "key must not be empty");
        assert_eq!(store.load("app:a:").await.unwrap(), None);
    }
}
