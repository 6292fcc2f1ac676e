//! Shared control state: shutdown, drain and per-task pause, watched by every runner.

use std::collections::{HashMap, HashSet};

use tokio::sync::watch;

/// What the app was asked to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ControlState {
    pub(crate) shutdown: bool,
    pub(crate) draining: bool,
    pub(crate) paused: HashSet<String>,
}

impl ControlState {
    /// Whether the runner of `task` must stop fetching.
    pub(crate) fn stops_fetching(&self, task: &str) -> bool {
        self.shutdown || self.draining || self.paused.contains(task)
    }
}

/// What a runner is doing, as reported to the app handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerStatus {
    /// Fetching and executing deliveries.
    Running,
    /// Stopped fetching with no delivery in flight (drained or paused).
    Parked,
    /// Exited (shutdown or error).
    Stopped,
}

/// The runners' statuses by task name.
pub(crate) type StatusMap = HashMap<String, RunnerStatus>;

pub(crate) struct Control {
    pub(crate) state: watch::Sender<ControlState>,
    pub(crate) status: watch::Sender<StatusMap>,
}

impl Control {
    pub(crate) fn new() -> Self {
        Self {
            state: watch::Sender::new(ControlState::default()),
            status: watch::Sender::new(StatusMap::new()),
        }
    }

    pub(crate) fn set_status(&self, task: &str, status: RunnerStatus) {
        self.status
            .send_if_modified(|map| map.insert(task.to_string(), status) != Some(status));
    }
}
