//! How the conformance suite gets a backend.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use onestep_core::clock::ManualClock;
use onestep_core::execution::{ExecutionLimits, LeasedExecutionBackend, MemoryExecutionBackend};
use time::macros::datetime;

/// What one conformance case asks of a backend: a controllable clock, limits, a reclaim batch
/// size, and a store name that isolates it from every other case (own tables, own database).
#[derive(Debug, Clone)]
pub struct Setup {
    /// The clock the backend must decide leases with.
    pub clock: ManualClock,
    /// Size limits.
    pub limits: ExecutionLimits,
    /// Reclaim batch size.
    pub reclaim_batch_size: usize,
    /// A unique name (letters, digits, underscores) for this case's tables.
    pub store: String,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            clock: ManualClock::new(datetime!(2026-01-01 00:00 UTC)),
            limits: ExecutionLimits::default(),
            reclaim_batch_size: 100,
            store: format!("t{}", uuid::Uuid::new_v4().simple())
                .chars()
                .take(20)
                .collect(),
        }
    }
}

/// Builds backends for the conformance suite.
///
/// Two calls with the same `setup.store` must return backends over the same data (two API
/// processes, or an API and a worker, sharing tables).
///
/// # Example
/// ```
/// use onestep_testkit::{BackendFactory, MemoryFactory, Setup};
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let factory = MemoryFactory::default();
/// let setup = Setup::default();
/// let _backend = factory.create(&setup).await;
/// # });
/// ```
#[async_trait]
pub trait BackendFactory: Send + Sync {
    /// The backend type.
    type Backend: LeasedExecutionBackend + Clone + 'static;

    /// A backend for `setup`. Panics with a clear message when its server cannot be reached.
    async fn create(&self, setup: &Setup) -> Self::Backend;
}

/// Builds [`MemoryExecutionBackend`]s; backends with the same store share data.
#[derive(Default, Clone)]
pub struct MemoryFactory {
    stores: Arc<Mutex<HashMap<String, MemoryExecutionBackend>>>,
}

#[async_trait]
impl BackendFactory for MemoryFactory {
    type Backend = MemoryExecutionBackend;

    async fn create(&self, setup: &Setup) -> MemoryExecutionBackend {
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        stores
            .entry(setup.store.clone())
            .or_insert_with(|| {
                MemoryExecutionBackend::with_options(
                    Arc::new(setup.clock.clone()),
                    setup.limits,
                    setup.reclaim_batch_size,
                )
                .unwrap_or_else(|e| panic!("invalid conformance setup: {e}"))
            })
            .clone()
    }
}
