//! `type: <dialect>_incremental`: new rows of the user's table in cursor order
//! ([`crate::incremental`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role,
};
use onestep_core::state::{CursorStore, InMemoryCursorStore};

use crate::incremental::{IncrementalOptions, IncrementalSource};
use crate::{Dialect, SqlConnector};

/// An incremental source type of dialect `D`, named `name`.
pub(super) struct IncrementalType<D> {
    pub(super) name: &'static str,
    pub(super) dialect: PhantomData<fn() -> D>,
}

const FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the connector resource"),
    FieldDoc::required("table", "string", "the table"),
    FieldDoc::required("key", "string", "its unique key (the last tie-breaker)"),
    FieldDoc::required("cursor", "list", "columns rows are read in the order of"),
    FieldDoc::optional(
        "where",
        "string",
        None,
        "SQL condition of rows to read (trusted text)",
    ),
    FieldDoc::optional("batch_size", "integer", Some("1000"), "most rows per fetch"),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("1.0"),
        "sleep after finding nothing new",
    ),
    FieldDoc::optional(
        "state",
        "string",
        None,
        "cursor store resource (default: in memory)",
    ),
    FieldDoc::optional(
        "state_key",
        "string",
        Some("<table>:<cursor>:key=<key>:where=<where>"),
        "cursor store key",
    ),
];

pub(super) struct IncrementalSpec {
    connector: String,
    state: Option<String>,
    options: IncrementalOptions,
}

impl<D: Dialect> ResourceType for IncrementalType<D> {
    type Options = IncrementalSpec;

    fn name(&self) -> &'static str {
        self.name
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some(match D::NAME {
            "postgres" => "PostgresIncrementalSource",
            _ => "IncrementalTableSource",
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<IncrementalSpec> {
        let connector = f.reference("connector", Role::Connector, Some(D::NAME));
        let table = f.string("table");
        let key = f.string("key");
        // An empty list is the options' own check ("must contain at least one column").
        let cursor = if f.has("cursor") {
            super::column_names(f, "cursor")
        } else {
            f.problem("cursor", "is required (a list of column names)");
            None
        };
        let where_sql = f.opt_string("where");
        let batch_size = f.opt_count("batch_size", 1);
        let poll_interval = f.opt_number("poll_interval_s", false);
        let state = f.opt_reference("state", Role::CursorStore, None);
        let state_key = f.opt_string("state_key");
        let mut options = IncrementalOptions::new(table?, key?, cursor?);
        if let Some(w) = where_sql {
            options = options.with_where(w);
        }
        if let Some(n) = batch_size {
            options = options.with_batch_size(n);
        }
        if let Some(s) = poll_interval {
            options = options.with_poll_interval(Duration::from_secs_f64(s));
        }
        if let Some(k) = state_key {
            options = options.with_state_key(k);
        }
        super::report(f, options.validate(D::SCHEMA));
        Some(IncrementalSpec {
            connector: connector?,
            state,
            options,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: IncrementalSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SqlConnector<D>>(&spec.connector, D::NAME)?;
        let store: Arc<dyn CursorStore> = match &spec.state {
            Some(name) => ctx.cursor_store(name)?,
            None => Arc::new(InMemoryCursorStore::default()),
        };
        let source = IncrementalSource::new(SqlConnector::clone(&connector), spec.options, store)?;
        Ok(Built::Source(Arc::new(source)))
    }
}
