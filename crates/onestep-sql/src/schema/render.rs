//! Each dialect's DDL, rendered from the one table definition in [`super::table`].
//!
//! The text is SQLAlchemy's for the reference's schema (tabs, clause order, the quoted `'0'`
//! default), so the statements stay comparable line by line with what the reference runs; the
//! differences are the ones [`super::render_ddl`] documents (`IF NOT EXISTS`, every name quoted,
//! MySQL's indexes inside `CREATE TABLE`).

use super::Dialect;
use super::table::{ATTEMPTS, Column, Constraint, Default, EXECUTIONS, Index, Kind, Role, Table};

/// The names pasted into the DDL: the two tables, each derived object name by its
/// [`super::ObjectNames`] field, and the UUID column type.
pub(crate) struct Names<'a> {
    pub(crate) executions: &'a str,
    pub(crate) attempts: &'a str,
    pub(crate) objects: Vec<(&'static str, &'a str)>,
    pub(crate) uuid_type: &'a str,
}

impl Names<'_> {
    fn table(&self, role: Role) -> &str {
        match role {
            Role::Executions => self.executions,
            Role::Attempts => self.attempts,
        }
    }

    /// The name of object `field`; a field the dialect does not name renders as the field
    /// itself, which the tests would show (every field used by the model is always present).
    fn object<'n>(&'n self, field: &'n str) -> &'n str {
        self.objects
            .iter()
            .find(|(name, _)| *name == field)
            .map_or(field, |(_, value)| *value)
    }
}

/// Every statement, in execution order: each table, then (outside MySQL) its indexes.
pub(crate) fn statements(dialect: Dialect, names: &Names<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for table in [&EXECUTIONS, &ATTEMPTS] {
        out.push(create_table(dialect, table, names));
        if !dialect.is_mysql_family() {
            out.extend(
                table
                    .indexes
                    .iter()
                    .map(|index| create_index(dialect, table, index, names)),
            );
        }
    }
    out
}

fn quote(dialect: Dialect, identifier: &str) -> String {
    if dialect.is_mysql_family() {
        format!("`{identifier}`")
    } else {
        format!("\"{identifier}\"")
    }
}

fn create_table(dialect: Dialect, table: &Table, names: &Names<'_>) -> String {
    let mut lines: Vec<String> = table
        .columns
        .iter()
        .map(|column| column_line(dialect, column, names))
        .collect();
    lines.push("PRIMARY KEY (id)".to_owned());
    lines.extend(
        table
            .constraints
            .iter()
            .map(|constraint| constraint_line(dialect, constraint, names)),
    );
    let mut trailer = ")";
    if dialect.is_mysql_family() {
        lines.extend(
            table
                .indexes
                .iter()
                .map(|index| inline_index(dialect, index, names)),
        );
        trailer = ")ENGINE=InnoDB CHARSET=utf8mb4";
    }
    let body: Vec<String> = lines.into_iter().map(|line| format!("\t{line}")).collect();
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n{}\n{trailer}",
        quote(dialect, names.table(table.role)),
        body.join(",\n"),
    )
}

fn column_line(dialect: Dialect, column: &Column, names: &Names<'_>) -> String {
    let kind = match column.kind {
        Kind::Uuid => names.uuid_type.to_owned(),
        Kind::Varchar(length) => format!("VARCHAR({length})"),
        Kind::Json if dialect == Dialect::Postgres => "JSONB".to_owned(),
        Kind::Json => "JSON".to_owned(),
        Kind::Integer => "INTEGER".to_owned(),
        Kind::BigInt => "BIGINT".to_owned(),
        Kind::Timestamp => match dialect {
            Dialect::Postgres => "TIMESTAMP WITH TIME ZONE",
            Dialect::MySql | Dialect::MariaDb => "DATETIME(6)",
            Dialect::Sqlite => "DATETIME",
        }
        .to_owned(),
    };
    let default = column.default.map(|default| match default {
        Default::Zero => "'0'",
        Default::EmptyObject if dialect.is_mysql_family() => "(JSON_OBJECT())",
        Default::EmptyObject => "'{}'",
    });
    let not_null = if column.nullable { "" } else { " NOT NULL" };
    let mut line = format!("{} {kind}", column.name);
    match default {
        // SQLAlchemy's MySQL dialect writes NOT NULL first, the others DEFAULT first.
        Some(default) if dialect.is_mysql_family() => {
            line.push_str(&format!("{not_null} DEFAULT {default}"));
        }
        Some(default) => line.push_str(&format!(" DEFAULT {default}{not_null}")),
        None => line.push_str(not_null),
    }
    line
}

fn constraint_line(dialect: Dialect, constraint: &Constraint, names: &Names<'_>) -> String {
    match *constraint {
        Constraint::Check { name, expression } => format!(
            "CONSTRAINT {} CHECK ({expression})",
            quote(dialect, names.object(name))
        ),
        Constraint::Unique { name, columns } => format!(
            "CONSTRAINT {} UNIQUE ({})",
            quote(dialect, names.object(name)),
            columns.join(", ")
        ),
        Constraint::CascadeForeignKey {
            name,
            column,
            references,
        } => {
            // PostgreSQL and SQLite leave it unnamed, as the reference does.
            let named = if dialect.is_mysql_family() {
                format!("CONSTRAINT {} ", quote(dialect, names.object(name)))
            } else {
                String::new()
            };
            format!(
                "{named}FOREIGN KEY({column}) REFERENCES {} (id) ON DELETE CASCADE",
                quote(dialect, names.table(references))
            )
        }
    }
}

fn index_columns(index: &Index) -> String {
    let columns: Vec<String> = index
        .columns
        .iter()
        .map(|(column, descending)| {
            if *descending {
                format!("{column} DESC")
            } else {
                (*column).to_owned()
            }
        })
        .collect();
    columns.join(", ")
}

/// MySQL's `INDEX` clause inside `CREATE TABLE`: MySQL has no partial indexes, and no
/// `CREATE INDEX IF NOT EXISTS` (MariaDB has).
fn inline_index(dialect: Dialect, index: &Index, names: &Names<'_>) -> String {
    let unique = if index.unique { "UNIQUE " } else { "" };
    format!(
        "{unique}INDEX {} ({})",
        quote(dialect, names.object(index.name)),
        index_columns(index)
    )
}

fn create_index(dialect: Dialect, table: &Table, index: &Index, names: &Names<'_>) -> String {
    let unique = if index.unique { "UNIQUE " } else { "" };
    let partial = index
        .partial
        .map(|predicate| format!(" WHERE {predicate}"))
        .unwrap_or_default();
    format!(
        "CREATE {unique}INDEX IF NOT EXISTS {} ON {} ({}){partial}",
        quote(dialect, names.object(index.name)),
        quote(dialect, names.table(table.role)),
        index_columns(index)
    )
}
