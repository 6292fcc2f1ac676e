//! `type: <dialect>_table_queue`: a source over the user's own table ([`crate::table_queue`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::{Map, Value};

use crate::table_queue::{TableQueueOptions, TableQueueSource};
use crate::{Dialect, SqlConnector};

/// A table queue type of dialect `D`, named `name`.
pub(super) struct TableQueueType<D> {
    pub(super) name: &'static str,
    pub(super) dialect: PhantomData<fn() -> D>,
}

const FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the connector resource"),
    FieldDoc::required("table", "string", "the table"),
    FieldDoc::required("key", "string", "its unique key column (claim order)"),
    FieldDoc::required(
        "where",
        "string",
        "SQL condition of ready rows (trusted text)",
    ),
    FieldDoc::required(
        "claim",
        "mapping",
        "column values set when a row is claimed",
    ),
    FieldDoc::required("ack", "mapping", "column values set on success"),
    FieldDoc::optional(
        "nack",
        "mapping",
        None,
        "column values set on retry, failure and release",
    ),
    FieldDoc::optional("batch_size", "integer", Some("100"), "most rows per claim"),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("1.0"),
        "sleep after an empty claim",
    ),
];

/// A `column: value` mapping field; `None` (with a problem) when it is not one.
fn columns(f: &mut Fields<'_>, key: &str, required: bool) -> Option<Map<String, Value>> {
    match f.value(key) {
        None | Some(Value::Null) if !required => Some(Map::new()),
        None | Some(Value::Null) => {
            f.problem(key, "is required (a mapping of column: value)");
            None
        }
        Some(Value::Object(map)) => Some(map.clone()),
        Some(other) => {
            f.problem(
                key,
                format!(
                    "expected a mapping of column: value, got {}",
                    type_name(other)
                ),
            );
            None
        }
    }
}

pub(super) struct TableQueueSpec {
    connector: String,
    options: TableQueueOptions,
}

impl<D: Dialect> ResourceType for TableQueueType<D> {
    type Options = TableQueueSpec;

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
            "postgres" => "PostgresTableQueueSource",
            _ => "TableQueueSource",
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<TableQueueSpec> {
        let connector = f.reference("connector", Role::Connector, Some(D::NAME));
        let table = f.string("table");
        let key = f.string("key");
        let where_sql = f.string("where");
        let claim = columns(f, "claim", true);
        let ack = columns(f, "ack", true);
        let nack = columns(f, "nack", false);
        let batch_size = f.opt_count("batch_size", 1);
        let poll_interval = f.opt_number("poll_interval_s", false);
        let mut options = TableQueueOptions::new(table?, key?, where_sql?)
            .with_claim(claim?)
            .with_ack(ack?)
            .with_nack(nack?);
        if let Some(n) = batch_size {
            options = options.with_batch_size(n);
        }
        if let Some(s) = poll_interval {
            options = options.with_poll_interval(Duration::from_secs_f64(s));
        }
        super::report(f, options.validate(D::SCHEMA));
        Some(TableQueueSpec {
            connector: connector?,
            options,
        })
    }

    fn build(
        &self,
        name: &str,
        spec: TableQueueSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        if !spec.options.claim.is_empty() && spec.options.nack.is_empty() {
            // The reference warns too: the configuration is valid, but risky.
            tracing::warn!(
                resource = name,
                "nack is empty while claim is set: failed rows will neither be retried nor \
                 marked failed; set nack fields (usually reverting the claim columns) if retry \
                 is intended"
            );
        }
        let connector = ctx.connector::<SqlConnector<D>>(&spec.connector, D::NAME)?;
        let source = TableQueueSource::new(SqlConnector::clone(&connector), spec.options)?;
        Ok(Built::Source(Arc::new(source)))
    }
}
