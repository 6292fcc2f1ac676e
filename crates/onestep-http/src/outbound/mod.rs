//! Outbound HTTP, as the reference's core has it: [`HttpSink`] sends each envelope as a
//! request, [`HttpFetcher`] is an endpoint a handler calls. Both are built on `reqwest`
//! (rustls with the platform's root certificates); YAML types `http_sink` and `http_fetcher`
//! ([`crate::catalog`]).

pub(crate) mod catalog;
mod fetcher;
pub mod request;
mod sink;
pub mod template;

pub use fetcher::{HttpFetcher, RowsExtractor};
pub use request::{RequestSpec, redact_url};
pub use sink::HttpSink;

/// The HTTP client both use: connection pooling, no total timeout of its own (each request
/// has its `timeout_s`), redirects followed as urllib follows them (up to 10).
fn client() -> onestep_core::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .user_agent(concat!("onestep/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| {
            onestep_core::Error::invalid("http client", format!("could not be built: {e}"))
        })
}
