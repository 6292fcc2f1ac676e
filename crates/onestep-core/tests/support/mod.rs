//! Test doubles shared by the runtime contract tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Delivery, Envelope, Error,
    FailureInfo, Resource, Result, Sink, Source, TaskEvent,
};
use serde_json::Value;
use tokio::sync::Notify;

/// A shared, ordered log of what happened.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    pub fn push(&self, entry: impl Into<String>) {
        self.0.lock().unwrap().push(entry.into());
    }
    pub fn entries(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn count(&self, prefix: &str) -> usize {
        self.entries()
            .iter()
            .filter(|e| e.starts_with(prefix))
            .count()
    }
}

/// A source that hands out scripted bodies and records how each delivery was settled.
pub struct ScriptedSource {
    pub name: String,
    pub bodies: Mutex<VecDeque<Value>>,
    pub errors: Mutex<VecDeque<Error>>,
    pub log: Log,
    pub cancel_safe: bool,
    /// When set, every fetch waits for a notification before answering.
    pub gate: Option<Arc<Notify>>,
    /// When set, `retry` never returns.
    pub retry_hangs: bool,
    pub fail_errors: bool,
    pub poll: Duration,
    /// How long each ack takes (logged as `ack-start:` when it begins); zero by default.
    pub ack_delay: Duration,
    /// What its deliveries answer to `frees_slot_before_ack` (default `false`).
    pub frees_slot_before_ack: bool,
    /// When set, every fetch returns this many deliveries more than it was asked for.
    pub over_deliver: usize,
    /// When set, every ack fails (after `ack_delay`).
    pub ack_fails: bool,
    /// What `concurrent_fetches` answers (default 1).
    pub concurrent_fetches: usize,
    /// The `limit` of every fetch, in the order the fetches began.
    pub limits: Mutex<Vec<usize>>,
    /// When set, every fetch panics.
    pub fetch_panics: bool,
    /// How long every fetch takes (after the gate); zero by default.
    pub fetch_delay: Duration,
    /// Fetches under way now, and the most ever under way at once.
    pub fetching: Arc<std::sync::atomic::AtomicUsize>,
    pub most_fetching: Arc<std::sync::atomic::AtomicUsize>,
}

impl ScriptedSource {
    pub fn new(bodies: impl IntoIterator<Item = Value>, log: &Log) -> Self {
        Self {
            name: "scripted".into(),
            bodies: Mutex::new(bodies.into_iter().collect()),
            errors: Mutex::new(VecDeque::new()),
            log: log.clone(),
            cancel_safe: true,
            gate: None,
            retry_hangs: false,
            fail_errors: false,
            poll: Duration::from_millis(50),
            ack_delay: Duration::ZERO,
            frees_slot_before_ack: false,
            over_deliver: 0,
            ack_fails: false,
            concurrent_fetches: 1,
            limits: Mutex::new(Vec::new()),
            fetch_panics: false,
            fetch_delay: Duration::ZERO,
            fetching: Arc::default(),
            most_fetching: Arc::default(),
        }
    }

    pub fn with_fetch_errors(self, errors: impl IntoIterator<Item = Error>) -> Self {
        *self.errors.lock().unwrap() = errors.into_iter().collect();
        self
    }
}

pub fn connector_error(kind: ConnectorErrorKind) -> Error {
    ConnectorOperationError::new("test", ConnectorOperation::Fetch, kind, "scripted").into()
}

#[async_trait]
impl Resource for ScriptedSource {
    fn name(&self) -> &str {
        &self.name
    }
    async fn open(&self) -> Result<()> {
        self.log.push(format!("open:{}", self.name));
        Ok(())
    }
    async fn close(&self) -> Result<()> {
        self.log.push(format!("close:{}", self.name));
        Ok(())
    }
}

#[async_trait]
impl Source for ScriptedSource {
    async fn fetch(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.limits.lock().unwrap().push(limit);
        let now = self.fetching.fetch_add(1, SeqCst) + 1;
        self.most_fetching.fetch_max(now, SeqCst);
        let answer = self.answer(limit).await;
        self.fetching.fetch_sub(1, SeqCst);
        answer
    }
    fn batch_size(&self) -> usize {
        100
    }
    fn poll_interval(&self) -> Duration {
        self.poll
    }
    fn fetch_is_cancel_safe(&self) -> bool {
        self.cancel_safe
    }
    fn concurrent_fetches(&self) -> usize {
        self.concurrent_fetches
    }
}

impl ScriptedSource {
    /// What one fetch answers: scripted errors first, then up to `limit` bodies.
    async fn answer(&self, limit: usize) -> Result<Vec<Box<dyn Delivery>>> {
        if let Some(gate) = &self.gate {
            self.log.push("fetch:waiting");
            gate.notified().await;
        }
        if !self.fetch_delay.is_zero() {
            tokio::time::sleep(self.fetch_delay).await;
        }
        assert!(!self.fetch_panics, "scripted fetch panic");
        if let Some(err) = self.errors.lock().unwrap().pop_front() {
            self.log.push("fetch:error");
            return Err(err);
        }
        let mut bodies = self.bodies.lock().unwrap();
        let n = limit.saturating_add(self.over_deliver).min(bodies.len());
        Ok(bodies
            .drain(..n)
            .map(|body| {
                Box::new(ScriptedDelivery {
                    envelope: Envelope::new(body),
                    log: self.log.clone(),
                    retry_hangs: self.retry_hangs,
                    fail_errors: self.fail_errors,
                    ack_delay: self.ack_delay,
                    frees_slot_before_ack: self.frees_slot_before_ack,
                    ack_fails: self.ack_fails,
                }) as Box<dyn Delivery>
            })
            .collect())
    }
}

pub struct ScriptedDelivery {
    pub envelope: Envelope,
    pub log: Log,
    pub retry_hangs: bool,
    pub fail_errors: bool,
    pub ack_delay: Duration,
    pub frees_slot_before_ack: bool,
    pub ack_fails: bool,
}

#[async_trait]
impl Delivery for ScriptedDelivery {
    fn envelope(&self) -> &Envelope {
        &self.envelope
    }
    async fn start_processing(&mut self) -> Result<()> {
        self.log.push(format!("start:{}", self.envelope.body));
        Ok(())
    }
    async fn release_unstarted(&mut self) -> Result<()> {
        self.log.push(format!("release:{}", self.envelope.body));
        Ok(())
    }
    fn frees_slot_before_ack(&self) -> bool {
        self.frees_slot_before_ack
    }
    async fn ack(&mut self) -> Result<()> {
        if !self.ack_delay.is_zero() {
            self.log.push(format!("ack-start:{}", self.envelope.body));
            tokio::time::sleep(self.ack_delay).await;
        }
        if self.ack_fails {
            self.log.push(format!("ack-failed:{}", self.envelope.body));
            return Err(Error::other(std::io::Error::other("ack refused")));
        }
        self.log.push(format!("ack:{}", self.envelope.body));
        Ok(())
    }
    async fn retry(&mut self, delay: Option<Duration>) -> Result<()> {
        self.log
            .push(format!("retry:{}:{:?}", self.envelope.body, delay));
        if self.retry_hangs {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
    async fn fail(&mut self, failure: &FailureInfo) -> Result<()> {
        self.log
            .push(format!("fail:{}:{}", self.envelope.body, failure.kind));
        if self.fail_errors {
            return Err(Error::other(std::io::Error::other("fail refused")));
        }
        Ok(())
    }
}

/// A sink that records what it received, or fails every send.
pub struct RecordingSink {
    pub name: String,
    pub received: Mutex<Vec<Envelope>>,
    pub fails: bool,
    pub log: Log,
}

impl RecordingSink {
    pub fn new(name: &str, log: &Log) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            received: Mutex::new(Vec::new()),
            fails: false,
            log: log.clone(),
        })
    }
    pub fn failing(name: &str, log: &Log) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            received: Mutex::new(Vec::new()),
            fails: true,
            log: log.clone(),
        })
    }
    pub fn bodies(&self) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.body.clone())
            .collect()
    }
}

#[async_trait]
impl Resource for RecordingSink {
    fn name(&self) -> &str {
        &self.name
    }
    async fn open(&self) -> Result<()> {
        self.log.push(format!("open:{}", self.name));
        Ok(())
    }
    async fn close(&self) -> Result<()> {
        self.log.push(format!("close:{}", self.name));
        Ok(())
    }
}

#[async_trait]
impl Sink for RecordingSink {
    async fn send(&self, envelope: Envelope) -> Result<()> {
        self.log
            .push(format!("send:{}:{}", self.name, envelope.body));
        if self.fails {
            return Err(Error::other(std::io::Error::other("sink is down")));
        }
        self.received.lock().unwrap().push(envelope);
        Ok(())
    }
}

/// Collects task events.
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<TaskEvent>>>);

impl Events {
    pub fn kinds(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.kind.as_str().to_string())
            .collect()
    }
    pub fn all(&self) -> Vec<TaskEvent> {
        self.0.lock().unwrap().clone()
    }
    pub fn recorder(&self) -> impl Fn(&TaskEvent) + Send + Sync + 'static {
        let inner = self.0.clone();
        move |e: &TaskEvent| inner.lock().unwrap().push(e.clone())
    }
}

/// Polls `cond` every 10 ms (virtual time under a paused clock) until it holds, up to `limit`.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Counts how many handlers (or hooks) run at once, and the most that ever did.
#[derive(Clone, Default)]
pub struct Peak {
    running: Arc<std::sync::atomic::AtomicUsize>,
    most: Arc<std::sync::atomic::AtomicUsize>,
}

/// A boxed handler future, as [`Peak::handler`] returns.
pub type HandlerFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = std::result::Result<(), onestep_core::TaskError>> + Send>,
>;

impl Peak {
    /// One more is running.
    pub fn enter(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.running.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
    }

    /// One fewer is running.
    pub fn leave(&self) {
        self.running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// The most that ran at once.
    pub fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A handler that runs for `pause()` and is counted while it does.
    pub fn handler(
        &self,
        pause: impl Fn() -> Duration + Send + Sync + 'static,
    ) -> impl Fn(onestep_core::TaskContext, Value) -> HandlerFuture + Send + Sync + 'static {
        let peak = self.clone();
        let pause = Arc::new(pause);
        move |_ctx, _v| {
            let (peak, pause) = (peak.clone(), pause.clone());
            Box::pin(async move {
                peak.enter();
                tokio::time::sleep(pause()).await;
                peak.leave();
                Ok(())
            })
        }
    }
}
