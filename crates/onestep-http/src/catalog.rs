//! This crate's resource types for declarative apps: `webhook` (a source), `http_sink` and
//! `http_fetcher`.
//!
//! ```
//! let mut catalog = onestep_core::catalog::Catalog::core();
//! onestep_http::catalog::register(&mut catalog);
//! assert!(catalog.get("webhook").is_some());
//! assert!(catalog.get("http_sink").is_some());
//! ```

use onestep_core::catalog::Catalog;

pub use crate::outbound::catalog::{HttpFetcherType, HttpSinkType};
pub use crate::webhook::WebhookType;

/// Adds `webhook`, `http_sink` and `http_fetcher`.
pub fn register(catalog: &mut Catalog) {
    catalog
        .add(WebhookType)
        .add(HttpSinkType)
        .add(HttpFetcherType);
}
