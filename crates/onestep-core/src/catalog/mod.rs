//! The catalog of resource types a declarative app (YAML) can name, and the interface a crate
//! implements to add its own.
//!
//! A resource type reads its fields once into an options value ([`ResourceType::read`], through
//! [`Fields`], which keeps every problem with its YAML path) and builds a source, sink or
//! connector from it ([`ResourceType::build`]). The same read serves `onestep check` and the
//! build, so checks and defaults are written once. Crates register their types into a
//! [`Catalog`]: this crate the in-process ones ([`Catalog::core`]: `memory`, `interval`,
//! `cron`), `onestep-sql` its connectors and execution sources, `onestep-http` the webhook; a
//! binary composes the catalogs it wants.
//!
//! ```
//! use std::sync::Arc;
//! use onestep_core::catalog::{
//!     BuildContext, BuildError, Built, Catalog, FieldDoc, Fields, ResourceType, Role,
//! };
//! use onestep_core::MemoryQueue;
//!
//! /// `type: bounded_queue`, a memory queue whose size is required.
//! struct BoundedQueue;
//!
//! const FIELDS: &[FieldDoc] = &[FieldDoc::required("size", "integer", "the most messages held")];
//!
//! impl ResourceType for BoundedQueue {
//!     type Options = usize;
//!     fn name(&self) -> &'static str { "bounded_queue" }
//!     fn roles(&self) -> &'static [Role] { &[Role::Source, Role::Sink] }
//!     fn fields(&self) -> &'static [FieldDoc] { FIELDS }
//!     fn read(&self, fields: &mut Fields<'_>) -> Option<usize> {
//!         if !fields.has("size") {
//!             fields.problem("size", "is required (a positive integer)");
//!         }
//!         fields.opt_count("size", 1)
//!     }
//!     fn build(&self, name: &str, size: usize, _ctx: &mut BuildContext<'_>)
//!         -> Result<Built, BuildError> {
//!         Ok(Built::both(Arc::new(MemoryQueue::new(name, size)?)))
//!     }
//! }
//!
//! let mut catalog = Catalog::core();
//! catalog.add(BoundedQueue);
//! assert!(catalog.get("bounded_queue").is_some());
//! ```

mod build;
mod core_types;
mod fields;

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::source::{Resource, Sink, Source};
use crate::state::{CursorStore, StateStore};

pub use build::BuildContext;
pub use fields::{Fields, Reference, child, normalize_type, type_name};

/// What a resource can be used as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A task's `source`.
    Source,
    /// A task's `emit` or `dead_letter`.
    Sink,
    /// Shared by other resources that name it (`connector: pg`).
    Connector,
    /// Durable key-value state: `app.state`, behind `ctx.state()`.
    StateStore,
    /// Where an incremental source keeps how far it has read.
    CursorStore,
}

impl Role {
    /// The word YAML and messages use (`source`, `sink`, `connector`, `state_store`,
    /// `cursor_store`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Source => "source",
            Self::Sink => "sink",
            Self::Connector => "connector",
            Self::StateStore => "state_store",
            Self::CursorStore => "cursor_store",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One documented field of a resource type, as `onestep catalog` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FieldDoc {
    /// The field name.
    pub name: &'static str,
    /// `string`, `number`, `integer`, `boolean`, `json`, `list`.
    pub kind: &'static str,
    /// Whether it must be given.
    pub required: bool,
    /// The default, as YAML would write it.
    pub default: Option<&'static str>,
    /// One line of help.
    pub help: &'static str,
}

impl FieldDoc {
    /// A field that must be given.
    pub const fn required(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind,
            required: true,
            default: None,
            help,
        }
    }

    /// A field that may be left out; `default` as YAML would write it.
    pub const fn optional(
        name: &'static str,
        kind: &'static str,
        default: Option<&'static str>,
        help: &'static str,
    ) -> Self {
        Self {
            name,
            kind,
            required: false,
            default,
            help,
        }
    }
}

/// A problem in a declaration: where (the YAML path) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The path, e.g. `resources.jobs.batch_size`.
    pub path: String,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.path, self.message)
    }
}

/// One entry of `resources`, as the loader hands it to the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSpec {
    /// Its name (the mapping key).
    pub name: String,
    /// Its normalized `type`.
    pub type_name: String,
    /// Every other field.
    pub fields: Map<String, Value>,
    /// Its path (`resources.<name>`).
    pub path: String,
}

/// Why a resource could not be built. The message names the field when one is at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BuildError {
    message: String,
    /// The message starts with a field of the resource (`batch_size must be …`).
    in_field: bool,
}

impl BuildError {
    /// An error with `message`, about the resource as a whole.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            in_field: false,
        }
    }

    /// An error whose `message` starts with the name of the field at fault
    /// (`batch_size must be >= 1, got 0`).
    pub fn in_field(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            in_field: true,
        }
    }

    /// The message qualified by the resource's path: `resources.x.field …` for a field,
    /// `resources.x: …` otherwise, unchanged when it already names a path.
    pub fn qualified(self, path: &str) -> Self {
        if self.message.starts_with("resources.") {
            self
        } else if self.in_field {
            Self::new(format!("{path}.{}", self.message))
        } else {
            Self::new(format!("{path}: {}", self.message))
        }
    }
}

/// An invalid option names its field; anything else is about the resource.
impl From<crate::Error> for BuildError {
    fn from(err: crate::Error) -> Self {
        match err {
            crate::Error::InvalidArgument { .. } => Self::in_field(err.to_string()),
            other => Self::new(other.to_string()),
        }
    }
}

/// What a resource type builds.
#[derive(Clone)]
pub enum Built {
    /// A source.
    Source(Arc<dyn Source>),
    /// A sink.
    Sink(Arc<dyn Sink>),
    /// One object that is both (a queue).
    Both {
        /// It, as a source.
        source: Arc<dyn Source>,
        /// It, as a sink.
        sink: Arc<dyn Sink>,
    },
    /// A connector other resources reference by name.
    Connector {
        /// The connector's type name (`postgres`), for messages.
        kind: &'static str,
        /// The connector, downcast by the resources that use it ([`BuildContext::connector`]).
        value: Arc<dyn Any + Send + Sync>,
        /// Opened and closed with the app.
        lifecycle: Arc<dyn Resource>,
    },
    /// A state store (`app.state`).
    StateStore(Arc<dyn StateStore>),
    /// A cursor store other resources name (`state: <name>`).
    CursorStore(Arc<dyn CursorStore>),
}

impl Built {
    /// A value that is both a source and a sink.
    pub fn both<T: Source + Sink + 'static>(value: Arc<T>) -> Self {
        Self::Both {
            source: value.clone(),
            sink: value,
        }
    }

    /// Its lifecycle: what `open` and `close` act on; `None` for the stores, which have none
    /// (they connect on first use).
    pub fn resource(&self) -> Option<Arc<dyn Resource>> {
        match self {
            Self::Source(s) | Self::Both { source: s, .. } => Some(s.clone()),
            Self::Sink(s) => Some(s.clone()),
            Self::Connector { lifecycle, .. } => Some(lifecycle.clone()),
            Self::StateStore(_) | Self::CursorStore(_) => None,
        }
    }
}

/// A resource type: its name, roles and fields, how its fields read into options, and how
/// options become a resource. Register one with [`Catalog::add`].
pub trait ResourceType: Send + Sync + 'static {
    /// What the fields read into.
    type Options;

    /// The normalized type name (`postgres_execution_source`).
    fn name(&self) -> &'static str;

    /// What it can be used as.
    fn roles(&self) -> &'static [Role];

    /// Its fields besides `type`, documented.
    fn fields(&self) -> &'static [FieldDoc];

    /// The class the Python reference builds for this type (`MemoryQueue`), which
    /// `onestep render` writes under a node's name so a diagram reads as the reference's; `None`
    /// (the default) writes the type name.
    fn class_name(&self) -> Option<&'static str> {
        None
    }

    /// Reads the fields, recording every problem in `fields`; `None` when the options cannot
    /// be made. Options read with problems recorded are not built.
    fn read(&self, fields: &mut Fields<'_>) -> Option<Self::Options>;

    /// Builds the resource `name` from its options; referenced resources come from `ctx`.
    fn build(
        &self,
        name: &str,
        options: Self::Options,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError>;
}

/// A registered type, its options type erased: what [`Catalog`] holds.
pub trait CatalogEntry: Send + Sync {
    /// The normalized type name.
    fn name(&self) -> &'static str;

    /// What it can be used as.
    fn roles(&self) -> &'static [Role];

    /// Its fields, documented.
    fn fields(&self) -> &'static [FieldDoc];

    /// The reference's class for it, or the type name ([`ResourceType::class_name`]).
    fn class_name(&self) -> &'static str;

    /// The problems in `spec` (strictly or not) and the references it makes.
    fn check(&self, spec: &ResourceSpec, strict: bool) -> (Vec<Problem>, Vec<Reference>);

    /// Builds `spec`; a spec with problems fails with the first.
    fn build(&self, spec: &ResourceSpec, ctx: &mut BuildContext<'_>) -> Result<Built, BuildError>;

    /// The fields its read asks for (of an empty declaration, checked strictly).
    fn asked_fields(&self) -> Vec<String>;
}

impl<T: ResourceType> CatalogEntry for T {
    fn name(&self) -> &'static str {
        ResourceType::name(self)
    }

    fn roles(&self) -> &'static [Role] {
        ResourceType::roles(self)
    }

    fn fields(&self) -> &'static [FieldDoc] {
        ResourceType::fields(self)
    }

    fn class_name(&self) -> &'static str {
        ResourceType::class_name(self).unwrap_or_else(|| ResourceType::name(self))
    }

    fn check(&self, spec: &ResourceSpec, strict: bool) -> (Vec<Problem>, Vec<Reference>) {
        let mut fields = Fields::new(&spec.name, &spec.path, &spec.fields, strict);
        let _ = self.read(&mut fields);
        fields.finish()
    }

    fn build(&self, spec: &ResourceSpec, ctx: &mut BuildContext<'_>) -> Result<Built, BuildError> {
        let mut fields = Fields::new(&spec.name, &spec.path, &spec.fields, false);
        let options = self.read(&mut fields);
        let (problems, _) = fields.finish();
        match (problems.into_iter().next(), options) {
            (None, Some(options)) => ResourceType::build(self, &spec.name, options, ctx),
            (Some(problem), _) => Err(BuildError::new(problem.to_string())),
            (None, None) => Err(BuildError::new(format!(
                "{}: the fields do not describe a {}",
                spec.path,
                ResourceType::name(self)
            ))),
        }
    }

    fn asked_fields(&self) -> Vec<String> {
        let empty = Map::new();
        let mut fields = Fields::new("audit", "resources.audit", &empty, true);
        let _ = self.read(&mut fields);
        fields.asked().into_iter().map(str::to_string).collect()
    }
}

/// Resource types by name.
#[derive(Clone, Default)]
pub struct Catalog {
    types: BTreeMap<&'static str, Arc<dyn CatalogEntry>>,
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.types.keys()).finish()
    }
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// This crate's types: `memory`, `interval` and `cron`.
    pub fn core() -> Self {
        let mut catalog = Self::new();
        core_types::register(&mut catalog);
        catalog
    }

    /// Adds (or replaces) a type.
    pub fn add<T: ResourceType>(&mut self, rtype: T) -> &mut Self {
        self.types
            .insert(ResourceType::name(&rtype), Arc::new(rtype));
        self
    }

    /// The type named `name` (normalized).
    pub fn get(&self, name: &str) -> Option<&dyn CatalogEntry> {
        self.types.get(name).map(|t| t.as_ref())
    }

    /// Every type, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &dyn CatalogEntry> {
        self.types.values().map(|t| t.as_ref())
    }

    /// Every type name, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        self.types.keys().copied().collect()
    }

    /// Checks resources of known types: their fields (with `strict`, also fields the type does
    /// not have) and the resources their fields name. Unknown types are the loader's to report.
    pub fn check(&self, specs: &[ResourceSpec], strict: bool) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut references = Vec::new();
        for spec in specs {
            let Some(rtype) = self.get(&spec.type_name) else {
                continue;
            };
            if strict {
                for key in spec.fields.keys() {
                    if !rtype.fields().iter().any(|f| f.name == key) {
                        let names: Vec<&str> = rtype.fields().iter().map(|f| f.name).collect();
                        problems.push(Problem {
                            path: child(&spec.path, key),
                            message: format!(
                                "unsupported field for {}; expected one of: {}",
                                spec.type_name,
                                names.join(", ")
                            ),
                        });
                    }
                }
            }
            let (found, named) = rtype.check(spec, strict);
            problems.extend(found);
            references.extend(named);
        }
        for reference in references {
            if let Some(problem) = self.check_reference(specs, &reference) {
                problems.push(problem);
            }
        }
        problems
    }

    /// What is wrong with `reference`, if anything.
    fn check_reference(&self, specs: &[ResourceSpec], reference: &Reference) -> Option<Problem> {
        let problem = |message: String| {
            Some(Problem {
                path: reference.path.clone(),
                message,
            })
        };
        let name = &reference.name;
        let role = reference.role;
        let Some(target) = specs.iter().find(|s| &s.name == name) else {
            return problem(format!(
                "unknown resource {name:?}; define the {role} under resources"
            ));
        };
        // A target of an unknown type was reported as such.
        let rtype = self.get(&target.type_name)?;
        if !rtype.roles().contains(&role) {
            let message = match role {
                Role::Connector => format!(
                    "resource {name:?} of type {} is not a connector",
                    target.type_name
                ),
                _ => format!(
                    "resource {name:?} of type {} cannot be used as a {role}",
                    target.type_name
                ),
            };
            return problem(message);
        }
        match reference.type_name {
            Some(wanted) if wanted != target.type_name => problem(format!(
                "resource {name:?} must be a {wanted} {role}, got a {} {role}",
                target.type_name
            )),
            _ => None,
        }
    }

    /// Where documentation and reads disagree: a documented field no read asks for, or a read
    /// of a field not documented (and so refused by `--strict`). Empty when they agree; a
    /// plugin's tests assert that.
    pub fn audit(&self) -> Vec<String> {
        let mut found = Vec::new();
        for rtype in self.iter() {
            let asked = rtype.asked_fields();
            for doc in rtype.fields() {
                if !asked.iter().any(|a| a == doc.name) {
                    found.push(format!(
                        "{}: {} is documented but never read",
                        rtype.name(),
                        doc.name
                    ));
                }
            }
            for key in asked {
                if !rtype.fields().iter().any(|d| d.name == key) {
                    found.push(format!(
                        "{}: {key} is read but not documented",
                        rtype.name()
                    ));
                }
            }
        }
        found
    }

    /// The roles of the type named `name`, empty when it is unknown.
    pub fn roles_of(&self, type_name: &str) -> &'static [Role] {
        self.get(type_name).map_or(&[], |t| t.roles())
    }
}
