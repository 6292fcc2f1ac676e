//! `SqsConnector`: where SQS is and as whom to reach it; the queues over it share one client.

use std::sync::Arc;

use onestep_core::{Resource, Result};

use crate::aws::{AwsSettings, LazyClient};

/// An SQS endpoint and credentials, and the SDK client built from them on first use and shared
/// by every queue over this connector (the client pools its HTTPS connections and refreshes
/// temporary credentials itself). Cheap to clone.
#[derive(Clone)]
pub struct SqsConnector {
    inner: Arc<LazyClient<aws_sdk_sqs::Client>>,
}

impl std::fmt::Debug for SqsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsConnector")
            .field("settings", self.inner.settings())
            .finish()
    }
}

impl SqsConnector {
    /// A connector with `settings` (checked here); no I/O until first use.
    pub fn new(settings: AwsSettings) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(LazyClient::new(settings)?),
        })
    }

    /// A connector over a client configured elsewhere (your own `aws_config` loading).
    pub fn from_client(client: aws_sdk_sqs::Client) -> Self {
        Self {
            inner: Arc::new(LazyClient::with_client(client)),
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &AwsSettings {
        self.inner.settings()
    }

    /// The client, built on first use.
    pub async fn client(&self, resource: &str) -> Result<aws_sdk_sqs::Client> {
        self.inner
            .get("sqs", resource, aws_sdk_sqs::Client::new)
            .await
    }

    pub(crate) fn secrets(&self) -> Vec<String> {
        self.inner.settings().secrets()
    }
}

#[async_trait::async_trait]
impl Resource for SqsConnector {
    fn name(&self) -> &str {
        "sqs"
    }
}
