//! `type: mysql_binlog`: row changes from the MySQL/MariaDB binary log ([`crate::binlog`]).

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role,
};
use onestep_core::state::{CursorStore, InMemoryCursorStore};

use crate::SqlConnector;
use crate::binlog::{BinlogOptions, BinlogSource, EventKind, default_state_key};
use crate::mysql::MySql;

/// The `mysql_binlog` source type.
pub(super) struct BinlogType;

const FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the mysql connector resource"),
    FieldDoc::required(
        "server_id",
        "integer",
        "replica id, unique among the server's replicas",
    ),
    FieldDoc::optional("schemas", "list", None, "only these schemas (default all)"),
    FieldDoc::optional(
        "tables",
        "list",
        None,
        "only these tables, by name or schema.table (default all)",
    ),
    FieldDoc::optional(
        "events",
        "list",
        Some("[insert, update, delete]"),
        "changes to deliver (aliases write, create, remove)",
    ),
    FieldDoc::optional("batch_size", "integer", Some("100"), "most rows per fetch"),
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
        "cursor store resource for the position (default: in memory)",
    ),
    FieldDoc::optional(
        "state_key",
        "string",
        Some("binlog:schemas=<…>:tables=<…>:events=<…>"),
        "cursor store key",
    ),
    FieldDoc::optional(
        "blocking",
        "boolean",
        Some("false"),
        "wait up to poll_interval_s inside a fetch for the first change",
    ),
];

pub(super) struct BinlogSpec {
    connector: String,
    state: Option<String>,
    options: BinlogOptions,
}

impl ResourceType for BinlogType {
    type Options = BinlogSpec;

    fn name(&self) -> &'static str {
        "mysql_binlog"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("BinlogSource")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<BinlogSpec> {
        let connector = f.reference("connector", Role::Connector, Some("mysql"));
        let server_id = if f.has("server_id") {
            f.opt_integer("server_id", 1)
                .and_then(|id| match u32::try_from(id) {
                    Ok(id) => Some(id),
                    Err(_) => {
                        f.problem(
                            "server_id",
                            format!("must be at most {}, got {id}", u32::MAX),
                        );
                        None
                    }
                })
        } else {
            f.problem("server_id", "is required (a positive integer)");
            None
        };
        let schemas = super::name_list(f, "schemas", "names");
        let tables = super::name_list(f, "tables", "names");
        let event_names = if f.has("events") {
            super::name_list(f, "events", "names")
        } else {
            Some(vec!["insert".into(), "update".into(), "delete".into()])
        };
        let mut events = Vec::new();
        for (i, name) in event_names.iter().flatten().enumerate() {
            match EventKind::parse(name) {
                Some(kind) => events.push(kind),
                None => f.problem(
                    &format!("events[{i}]"),
                    format!("must be insert, update or delete, got {name:?}"),
                ),
            }
        }
        let batch_size = f.opt_count("batch_size", 1);
        let poll_interval = f.opt_number("poll_interval_s", false);
        let state = f.opt_reference("state", Role::CursorStore, None);
        let state_key = f.opt_string("state_key");
        let blocking = f.opt_bool("blocking");
        let (schemas, tables, event_names) = (schemas?, tables?, event_names?);
        let mut options = BinlogOptions::new(server_id?)
            .with_schemas(schemas.clone())
            .with_tables(tables.clone())
            .with_events(events)
            // The reference derives the key from the events as spelled.
            .with_state_key(
                state_key.unwrap_or_else(|| default_state_key(&schemas, &tables, &event_names)),
            );
        if let Some(n) = batch_size {
            options = options.with_batch_size(n);
        }
        if let Some(s) = poll_interval {
            options = options.with_poll_interval(Duration::from_secs_f64(s));
        }
        if let Some(b) = blocking {
            options = options.with_blocking(b);
        }
        super::report(f, options.validate());
        Some(BinlogSpec {
            connector: connector?,
            state,
            options,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: BinlogSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SqlConnector<MySql>>(&spec.connector, "mysql")?;
        let store: Arc<dyn CursorStore> = match &spec.state {
            Some(name) => ctx.cursor_store(name)?,
            None => Arc::new(InMemoryCursorStore::default()),
        };
        let source = BinlogSource::new(SqlConnector::clone(&connector), spec.options, store)?;
        Ok(Built::Source(Arc::new(source)))
    }
}
