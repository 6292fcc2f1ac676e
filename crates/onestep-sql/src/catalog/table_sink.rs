//! `type: <dialect>_table_sink`: bodies written into the user's table ([`crate::table_sink`]).

use std::marker::PhantomData;
use std::sync::Arc;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::Value;

use crate::table_sink::{ColumnPolicy, SerializeJson, SinkMode, TableSink, TableSinkOptions};
use crate::{Dialect, SqlConnector};

/// A table sink type of dialect `D`, named `name`.
pub(super) struct TableSinkType<D> {
    pub(super) name: &'static str,
    pub(super) dialect: PhantomData<fn() -> D>,
}

const FIELDS: &[FieldDoc] = &[
    FieldDoc::required("connector", "string", "the connector resource"),
    FieldDoc::required("table", "string", "the table"),
    FieldDoc::optional("mode", "string", Some("insert"), "insert, upsert or update"),
    FieldDoc::optional(
        "keys",
        "list",
        None,
        "columns that find a row (upsert, update)",
    ),
    FieldDoc::optional(
        "update_columns",
        "json",
        None,
        "columns an upsert/update writes: names or {name, policy}",
    ),
    FieldDoc::optional(
        "update_expr",
        "mapping",
        None,
        "columns set to SQL expressions (trusted text)",
    ),
    FieldDoc::optional(
        "serialize_json",
        "string",
        Some("auto"),
        "lists and objects as JSON text: auto, always or never",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("1000"),
        "most rows of a list body per INSERT statement (one transaction per body)",
    ),
];

fn update_columns(f: &mut Fields<'_>) -> Option<Option<Vec<(String, ColumnPolicy)>>> {
    let Some(value) = f.value("update_columns") else {
        return Some(None);
    };
    let Value::Array(items) = value else {
        f.problem(
            "update_columns",
            format!(
                "expected a list of column names or {{name, policy}} mappings, got {}",
                type_name(value)
            ),
        );
        return None;
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("update_columns[{i}]");
        match item {
            Value::String(name) if !name.trim().is_empty() => {
                out.push((name.trim().to_owned(), ColumnPolicy::Overwrite));
            }
            Value::Object(entry) => {
                if let Some(unknown) = entry.keys().find(|k| *k != "name" && *k != "policy") {
                    f.problem(
                        &at,
                        format!("unknown key {unknown:?}; expected name and policy"),
                    );
                    return None;
                }
                let name = entry.get("name").and_then(Value::as_str).map(str::trim);
                let policy = match entry.get("policy").map(|p| p.as_str()) {
                    None => Some(ColumnPolicy::Overwrite),
                    Some(Some("overwrite")) => Some(ColumnPolicy::Overwrite),
                    Some(Some("skip_null")) => Some(ColumnPolicy::SkipNull),
                    Some(Some("backfill")) => Some(ColumnPolicy::Backfill),
                    Some(_) => None,
                };
                match (name, policy) {
                    (Some(name), Some(policy)) if !name.is_empty() => {
                        out.push((name.to_owned(), policy));
                    }
                    (None | Some(""), _) => {
                        f.problem(&at, "needs a non-empty name");
                        return None;
                    }
                    _ => {
                        f.problem(
                            &format!("{at}.policy"),
                            "must be one of overwrite, skip_null, backfill",
                        );
                        return None;
                    }
                }
            }
            other => {
                f.problem(
                    &at,
                    format!(
                        "expected a column name or a {{name, policy}} mapping, got {}",
                        type_name(other)
                    ),
                );
                return None;
            }
        }
    }
    Some(Some(out))
}

fn update_expr(f: &mut Fields<'_>) -> Option<Vec<(String, String)>> {
    match f.value("update_expr") {
        None => Some(Vec::new()),
        Some(Value::Object(map)) => {
            let mut out = Vec::with_capacity(map.len());
            for (column, expr) in map {
                match expr.as_str() {
                    Some(e) => out.push((column.clone(), e.to_owned())),
                    None => {
                        f.problem(
                            &format!("update_expr.{column}"),
                            format!("expected an SQL expression string, got {}", type_name(expr)),
                        );
                        return None;
                    }
                }
            }
            Some(out)
        }
        Some(other) => {
            f.problem(
                "update_expr",
                format!(
                    "expected a mapping of column: SQL expression, got {}",
                    type_name(other)
                ),
            );
            None
        }
    }
}

pub(super) struct TableSinkSpec {
    connector: String,
    options: TableSinkOptions,
}

impl<D: Dialect> ResourceType for TableSinkType<D> {
    type Options = TableSinkSpec;

    fn name(&self) -> &'static str {
        self.name
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some(match D::NAME {
            "postgres" => "PostgresTableSink",
            _ => "TableSink",
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<TableSinkSpec> {
        let connector = f.reference("connector", Role::Connector, Some(D::NAME));
        let table = f.string("table");
        let mode = match f.opt_string("mode").as_deref() {
            None | Some("insert") => Some(SinkMode::Insert),
            Some("upsert") => Some(SinkMode::Upsert),
            Some("update") => Some(SinkMode::Update),
            Some(other) => {
                f.problem(
                    "mode",
                    format!("must be one of insert, upsert, update; got {other:?}"),
                );
                None
            }
        };
        let keys = super::column_names(f, "keys");
        let columns = update_columns(f);
        let expr = update_expr(f);
        let serialize = match f.opt_string("serialize_json").as_deref() {
            None | Some("auto") => Some(SerializeJson::Auto),
            Some("always") => Some(SerializeJson::Always),
            Some("never") => Some(SerializeJson::Never),
            Some(other) => {
                f.problem(
                    "serialize_json",
                    format!("must be one of auto, always, never; got {other:?}"),
                );
                None
            }
        };
        let batch_size = f.opt_count("batch_size", 1);
        let mut options = TableSinkOptions::new(table?, mode?)
            .with_keys(keys?)
            .with_update_expr(expr?)
            .with_serialize_json(serialize?);
        if let Some(columns) = columns? {
            options = options.with_update_columns(columns);
        }
        if let Some(n) = batch_size {
            options = options.with_batch_size(n);
        }
        super::report(f, options.validate(D::SCHEMA));
        Some(TableSinkSpec {
            connector: connector?,
            options,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: TableSinkSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SqlConnector<D>>(&spec.connector, D::NAME)?;
        let sink = TableSink::new(SqlConnector::clone(&connector), spec.options)?;
        Ok(Built::Sink(Arc::new(sink)))
    }
}
