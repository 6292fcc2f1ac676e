//! `type: <dialect>_state_store` and `<dialect>_cursor_store`: the reference's key-value tables
//! through a connector ([`crate::state`]).

use std::marker::PhantomData;
use std::sync::Arc;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, FieldDoc, Fields, ResourceType, Role,
};

use crate::state::{SqlCursorStore, SqlStateStore, StateTable};
use crate::{Dialect, SqlConnector};

/// What a store resource reads into: the connector it names and its table.
pub(super) struct StoreSpec {
    connector: String,
    table: StateTable,
}

/// Which store a type builds.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum StoreKind {
    State,
    Cursor,
}

/// A state or cursor store type of dialect `D`, named `name`.
pub(super) struct StoreType<D> {
    pub(super) name: &'static str,
    pub(super) kind: StoreKind,
    pub(super) dialect: PhantomData<fn() -> D>,
}

/// The fields of a store type whose table defaults to `table (key, value, updated_at)`.
const fn store_fields(
    table: &'static str,
    key: &'static str,
    value: &'static str,
) -> [FieldDoc; 6] {
    [
        FieldDoc::required("connector", "string", "the connector resource"),
        FieldDoc::optional("table", "string", Some(table), "the table"),
        FieldDoc::optional("key_column", "string", Some(key), "primary-key column"),
        FieldDoc::optional(
            "value_column",
            "string",
            Some(value),
            "column of the JSON text",
        ),
        FieldDoc::optional(
            "updated_at_column",
            "string",
            Some("updated_at"),
            "column of the last save time",
        ),
        FieldDoc::optional(
            "auto_create",
            "boolean",
            Some("true"),
            "create the table when missing",
        ),
    ]
}

const STATE_FIELDS: [FieldDoc; 6] = store_fields("onestep_state", "state_key", "state_value");
const CURSOR_FIELDS: [FieldDoc; 6] = store_fields("onestep_cursor", "cursor_key", "cursor_value");

impl<D: Dialect> ResourceType for StoreType<D> {
    type Options = StoreSpec;

    fn name(&self) -> &'static str {
        self.name
    }

    fn roles(&self) -> &'static [Role] {
        match self.kind {
            StoreKind::State => &[Role::StateStore],
            StoreKind::Cursor => &[Role::CursorStore],
        }
    }

    fn fields(&self) -> &'static [FieldDoc] {
        match self.kind {
            StoreKind::State => &STATE_FIELDS,
            StoreKind::Cursor => &CURSOR_FIELDS,
        }
    }

    fn class_name(&self) -> Option<&'static str> {
        Some(match self.kind {
            StoreKind::State => "SQLAlchemyStateStore",
            StoreKind::Cursor => "SQLAlchemyCursorStore",
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<StoreSpec> {
        let connector = f.reference("connector", Role::Connector, Some(D::NAME));
        let mut table = match self.kind {
            StoreKind::State => StateTable::state(),
            StoreKind::Cursor => StateTable::cursor(),
        };
        for (key, slot) in [
            ("table", &mut table.table),
            ("key_column", &mut table.key_column),
            ("value_column", &mut table.value_column),
            ("updated_at_column", &mut table.updated_at_column),
        ] {
            if let Some(name) = f.opt_string(key) {
                *slot = name;
            }
        }
        if let Some(auto_create) = f.opt_bool("auto_create") {
            table.auto_create = auto_create;
        }
        super::report(f, table.validate(D::SCHEMA));
        Some(StoreSpec {
            connector: connector?,
            table,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: StoreSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SqlConnector<D>>(&spec.connector, D::NAME)?;
        let connector = SqlConnector::clone(&connector);
        Ok(match self.kind {
            StoreKind::State => {
                Built::StateStore(Arc::new(SqlStateStore::new(connector, spec.table)?))
            }
            StoreKind::Cursor => {
                Built::CursorStore(Arc::new(SqlCursorStore::new(connector, spec.table)?))
            }
        })
    }
}
