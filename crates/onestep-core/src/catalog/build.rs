//! [`BuildContext`]: builds declared resources by name, each once, in dependency order.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{BuildError, Built, Catalog, ResourceSpec};
use crate::source::{Resource, Sink, Source};
use crate::state::{CursorStore, StateStore};

/// The resources of one app being built: a type's [`build`](super::ResourceType::build) asks
/// it for the resources it names, built on first use (a cycle of references is an error), and
/// for state shared across the app's resources.
pub struct BuildContext<'a> {
    catalog: &'a Catalog,
    specs: &'a [ResourceSpec],
    built: HashMap<String, Built>,
    building: HashSet<String>,
    /// Connector lifecycles to open and close with the app.
    lifecycles: Vec<Arc<dyn Resource>>,
    /// One value per type, shared by the resources of this build.
    shared: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for BuildContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BuildContext")
            .field("built", &self.built.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<'a> BuildContext<'a> {
    /// A context that builds `specs` with the types of `catalog`.
    pub fn new(catalog: &'a Catalog, specs: &'a [ResourceSpec]) -> Self {
        Self {
            catalog,
            specs,
            built: HashMap::new(),
            building: HashSet::new(),
            lifecycles: Vec::new(),
            shared: HashMap::new(),
        }
    }

    /// The resource named `name`, built on first use. Errors start with the path of the
    /// resource at fault.
    pub fn get(&mut self, name: &str) -> Result<Built, BuildError> {
        if let Some(b) = self.built.get(name) {
            return Ok(b.clone());
        }
        let spec = self
            .specs
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| BuildError::new(format!("unknown resource {name:?}")))?;
        if !self.building.insert(name.to_string()) {
            return Err(BuildError::new(format!(
                "{}: resource references form a cycle through {name:?}",
                spec.path
            )));
        }
        let rtype = self.catalog.get(&spec.type_name).ok_or_else(|| {
            BuildError::new(format!(
                "{}.type: unknown resource type {:?}",
                spec.path, spec.type_name
            ))
        })?;
        let built = rtype
            .build(spec, self)
            .map_err(|e| e.qualified(&spec.path))?;
        if let Built::Connector { lifecycle, .. } = &built {
            self.lifecycles.push(lifecycle.clone());
        }
        self.building.remove(name);
        self.built.insert(name.to_string(), built.clone());
        Ok(built)
    }

    /// The resource `name` as a source.
    pub fn source(&mut self, name: &str) -> Result<Arc<dyn Source>, BuildError> {
        match self.get(name)? {
            Built::Source(s) | Built::Both { source: s, .. } => Ok(s),
            _ => Err(BuildError::new(format!(
                "resource {name:?} is not a source"
            ))),
        }
    }

    /// The resource `name` as a sink.
    pub fn sink(&mut self, name: &str) -> Result<Arc<dyn Sink>, BuildError> {
        match self.get(name)? {
            Built::Sink(s) | Built::Both { sink: s, .. } => Ok(s),
            _ => Err(BuildError::new(format!("resource {name:?} is not a sink"))),
        }
    }

    /// The resource `name` as a state store.
    pub fn state_store(&mut self, name: &str) -> Result<Arc<dyn StateStore>, BuildError> {
        match self.get(name)? {
            Built::StateStore(s) => Ok(s),
            _ => Err(BuildError::new(format!(
                "resource {name:?} is not a state store"
            ))),
        }
    }

    /// The resource `name` as a cursor store.
    pub fn cursor_store(&mut self, name: &str) -> Result<Arc<dyn CursorStore>, BuildError> {
        match self.get(name)? {
            Built::CursorStore(s) => Ok(s),
            _ => Err(BuildError::new(format!(
                "resource {name:?} is not a cursor store"
            ))),
        }
    }

    /// The connector `name`, which must be a `T` (of type `kind`, for messages).
    pub fn connector<T: Any + Send + Sync>(
        &mut self,
        name: &str,
        kind: &str,
    ) -> Result<Arc<T>, BuildError> {
        let Built::Connector {
            kind: found, value, ..
        } = self.get(name)?
        else {
            return Err(BuildError::new(format!(
                "resource {name:?} must be a {kind} connector, but it is not a connector"
            )));
        };
        value.downcast::<T>().map_err(|_| {
            BuildError::new(format!(
                "resource {name:?} must be a {kind} connector, got a {found} connector"
            ))
        })
    }

    /// The one `T` of this build, made with `T::default()` on first use: state the resources
    /// of one app share, such as the listeners webhook sources on one port serve from.
    pub fn shared<T: Default + Clone + Send + Sync + 'static>(&mut self) -> T {
        let slot = self
            .shared
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        // The slot of `TypeId::of::<T>()` always holds a `T`.
        slot.downcast_ref::<T>().cloned().unwrap_or_default()
    }

    /// The connectors built so far, to open and close with the app; taken once.
    pub fn take_lifecycles(&mut self) -> Vec<Arc<dyn Resource>> {
        std::mem::take(&mut self.lifecycles)
    }
}
