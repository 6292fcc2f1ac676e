//! This crate's resource types for declarative apps: `webhook`.
//!
//! ```
//! let mut catalog = onestep_core::catalog::Catalog::core();
//! onestep_http::catalog::register(&mut catalog);
//! assert!(catalog.get("webhook").is_some());
//! ```

use onestep_core::catalog::Catalog;

pub use crate::webhook::WebhookType;

/// Adds `webhook`.
pub fn register(catalog: &mut Catalog) {
    catalog.add(WebhookType);
}
