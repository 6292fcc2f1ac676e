//! One fetched message and the actions that settle it.

use std::time::Duration;

use async_trait::async_trait;

use crate::envelope::Envelope;
use crate::error::Result;
use crate::failure::FailureInfo;

/// A message fetched from a [`Source`](crate::source::Source), settled exactly once by the
/// executor with [`ack`](Delivery::ack), [`retry`](Delivery::retry) or [`fail`](Delivery::fail),
/// or handed back with [`release_unstarted`](Delivery::release_unstarted) when the runner stops
/// before the delivery started.
///
/// The executor calls, in order: `start_processing` once, then one settling action. If `fail`
/// returns an error the executor falls back to `retry`, so a delivery is never dropped.
///
/// # Example
/// ```
/// use async_trait::async_trait;
/// use onestep_core::{Delivery, Envelope, FailureInfo, Result};
/// use std::time::Duration;
///
/// struct Printed(Envelope);
///
/// #[async_trait]
/// impl Delivery for Printed {
///     fn envelope(&self) -> &Envelope { &self.0 }
///     async fn ack(&mut self) -> Result<()> { println!("done: {}", self.0.body); Ok(()) }
///     async fn retry(&mut self, _delay: Option<Duration>) -> Result<()> { Ok(()) }
///     async fn fail(&mut self, failure: &FailureInfo) -> Result<()> {
///         eprintln!("failed: {}", failure.message);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Delivery: Send + Sync {
    /// The message being delivered.
    fn envelope(&self) -> &Envelope;

    /// The message being delivered, shared: what the executor hands the handler's context and
    /// its events. The default copies [`envelope`](Delivery::envelope); a delivery that keeps
    /// its envelope in an [`Arc`](std::sync::Arc) returns it without copying the payload.
    fn shared_envelope(&self) -> std::sync::Arc<Envelope> {
        std::sync::Arc::new(self.envelope().clone())
    }

    /// Called once before any task code runs (starts lease heartbeats, for example).
    async fn start_processing(&mut self) -> Result<()> {
        Ok(())
    }

    /// Hands back a delivery that was fetched but never started (shutdown or drain raced the fetch).
    async fn release_unstarted(&mut self) -> Result<()> {
        Ok(())
    }

    /// The attempt succeeded.
    async fn ack(&mut self) -> Result<()>;

    /// The attempt failed and should be tried again after `delay` (immediately when `None`).
    async fn retry(&mut self, delay: Option<Duration>) -> Result<()>;

    /// The attempt failed for good.
    async fn fail(&mut self, failure: &FailureInfo) -> Result<()>;

    /// The tracked-execution view of this delivery, when it is one: the executor then completes
    /// the execution (storing the result or error) instead of calling ack, retry or fail.
    fn as_managed(&mut self) -> Option<&mut dyn crate::execution::ManagedDelivery> {
        None
    }

    /// Whether the runner may give this delivery's concurrency slot back once its attempt
    /// succeeded (handler, hooks and sinks done), before the ack has returned. Say yes only when
    /// the ack is storage I/O that runs no user code and the source does not count in-flight
    /// work by acks: tracked executions do (their completions are written in batches). Default
    /// `false`: the slot is held until the delivery is settled. An attempt that fails or is
    /// cancelled before settling holds its slot through its failure path (hooks and dead
    /// letters run user code).
    fn frees_slot_before_ack(&self) -> bool {
        false
    }
}
