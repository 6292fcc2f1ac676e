//! Where deliveries come from ([`Source`]), where results go ([`Sink`]), and the lifecycle both
//! share ([`Resource`]). Built-in sources live in the submodules.

pub mod buffer;
pub mod cron;
pub mod interval;
pub mod memory;
pub mod schedule;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::delivery::Delivery;
use crate::envelope::Envelope;
use crate::error::Result;

pub use schedule::Overlap;

/// Something with a name that is opened before use and closed after.
///
/// The app opens each resource once, in registration order, and closes them in reverse order;
/// a value that is both a source and a sink is opened once.
#[async_trait]
pub trait Resource: Send + Sync {
    /// The resource's name, used in logs, events and error messages.
    fn name(&self) -> &str;

    /// Connects or prepares the resource. Called once at app startup.
    async fn open(&self) -> Result<()> {
        Ok(())
    }

    /// Releases what `open` acquired. Called once at app shutdown.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// A source of deliveries polled by a task runner.
///
/// The runner asks for at most as many deliveries as the task has free slots. An empty answer
/// makes it sleep [`poll_interval`](Source::poll_interval). Failures of the dependency should be
/// [`ConnectorOperationError`](crate::ConnectorOperationError)s so the runner can tell a dropped
/// connection (back off, retry) from a misconfiguration (stop the app).
///
/// # Example
/// ```
/// use async_trait::async_trait;
/// use onestep_core::{Delivery, Resource, Result, Source};
///
/// /// A source that never has anything.
/// struct Idle;
///
/// #[async_trait]
/// impl Resource for Idle {
///     fn name(&self) -> &str { "idle" }
/// }
///
/// #[async_trait]
/// impl Source for Idle {
///     async fn fetch(&self, _limit: usize) -> Result<Vec<Box<dyn Delivery>>> { Ok(Vec::new()) }
/// }
/// ```
#[async_trait]
pub trait Source: Resource {
    /// Fetches up to `limit` deliveries (`limit >= 1`); an empty vector means nothing is ready.
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>>;

    /// The most deliveries one fetch returns.
    fn batch_size(&self) -> usize {
        1
    }

    /// How long a runner sleeps after an empty fetch.
    fn poll_interval(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// How many fetches a runner may have under way at once (at least one).
    ///
    /// A runner starts another fetch while one is under way only for slots that freed up
    /// meanwhile, so fetches in flight never ask for more than the task can run. A source whose
    /// fetch is a round trip to a server that serves many callers at once (a claim in a
    /// database) overlaps those round trips this way. The default, one, suits sources whose
    /// fetch must not run beside itself.
    fn concurrent_fetches(&self) -> usize {
        1
    }

    /// Whether a fetch may be dropped mid-way without losing deliveries.
    ///
    /// Sources that claim rows in a database are not cancel-safe: when the runner stops, it
    /// awaits their fetch and releases what came back unstarted.
    fn fetch_is_cancel_safe(&self) -> bool {
        true
    }

    /// Rejects a task this source cannot serve; called when the task is registered.
    fn validate_task(&self, _task_name: &str) -> Result<()> {
        Ok(())
    }

    /// Waits up to `max` for work to become available; called after an empty fetch. The default
    /// sleeps `max` (polling). Sources with a wake-up channel return as soon as work may be
    /// there, so idle runners pick work up without waiting a poll interval.
    async fn wait_ready(&self, max: Duration) {
        tokio::time::sleep(max).await;
    }

    /// Hands back what the source holds but has not returned from [`fetch`](Self::fetch) (a
    /// prefetch buffer of claimed work), so others can take it. The runner calls it whenever it
    /// stops fetching: on pause and on shutdown. The default holds nothing.
    async fn return_unstarted(&self) -> Result<()> {
        Ok(())
    }

    /// Called when a paused task resumes; schedules use it to skip the runs missed while paused.
    fn resume_after_pause(&self) {}

    /// Metadata describing the source, shown by `describe()`.
    fn describe(&self) -> Map<String, Value> {
        Map::new()
    }
}

/// A destination for task results and dead letters.
///
/// # Example
/// ```
/// use async_trait::async_trait;
/// use onestep_core::{Envelope, Resource, Result, Sink};
///
/// struct Stdout;
///
/// #[async_trait]
/// impl Resource for Stdout {
///     fn name(&self) -> &str { "stdout" }
/// }
///
/// #[async_trait]
/// impl Sink for Stdout {
///     async fn send(&self, envelope: Envelope) -> Result<()> {
///         println!("{}", envelope.body);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Sink: Resource {
    /// Sends one envelope.
    async fn send(&self, envelope: Envelope) -> Result<()>;

    /// Sends `body` with `meta` and zero attempts.
    async fn publish(&self, body: Value, meta: Map<String, Value>) -> Result<()> {
        self.send(Envelope::new(body).with_meta(meta)).await
    }
}

/// What [`Task::source`](crate::Task::source) accepts: a source by value, or one already
/// shared (`Arc<S>`, `Arc<dyn Source>`).
pub trait IntoSource {
    /// The source, shared.
    fn into_source(self) -> std::sync::Arc<dyn Source>;
}

impl<S: Source + 'static> IntoSource for S {
    fn into_source(self) -> std::sync::Arc<dyn Source> {
        std::sync::Arc::new(self)
    }
}

impl<S: Source + 'static> IntoSource for std::sync::Arc<S> {
    fn into_source(self) -> std::sync::Arc<dyn Source> {
        self
    }
}

impl IntoSource for std::sync::Arc<dyn Source> {
    fn into_source(self) -> std::sync::Arc<dyn Source> {
        self
    }
}

/// What [`Task::emit`](crate::Task::emit) and [`Task::dead_letter`](crate::Task::dead_letter)
/// accept as a sink: one by value, or one already shared (`Arc<S>`, `Arc<dyn Sink>`).
pub trait IntoSink {
    /// The sink, shared.
    fn into_sink(self) -> std::sync::Arc<dyn Sink>;
}

impl<S: Sink + 'static> IntoSink for S {
    fn into_sink(self) -> std::sync::Arc<dyn Sink> {
        std::sync::Arc::new(self)
    }
}

impl<S: Sink + 'static> IntoSink for std::sync::Arc<S> {
    fn into_sink(self) -> std::sync::Arc<dyn Sink> {
        self
    }
}

impl IntoSink for std::sync::Arc<dyn Sink> {
    fn into_sink(self) -> std::sync::Arc<dyn Sink> {
        self
    }
}
