//! `onestep catalog [--json] [--role ROLE]`.

use onestep_core::catalog::{CatalogEntry, Role};

use crate::registry::Registry;

/// Arguments of `catalog`.
#[derive(Debug, clap::Args)]
pub struct CatalogArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Only the types that can be used as this.
    #[arg(long, value_enum)]
    role: Option<RoleArg>,
}

/// The roles `--role` takes, spelled as YAML spells them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
enum RoleArg {
    Connector,
    Source,
    Sink,
    StateStore,
    CursorStore,
}

impl RoleArg {
    fn role(self) -> Role {
        match self {
            Self::Connector => Role::Connector,
            Self::Source => Role::Source,
            Self::Sink => Role::Sink,
            Self::StateStore => Role::StateStore,
            Self::CursorStore => Role::CursorStore,
        }
    }
}

/// Prints every resource type (of `--role`, when given) and handler.
pub fn catalog(args: CatalogArgs, registry: &Registry) -> u8 {
    let wanted = args.role.map(RoleArg::role);
    let shown = |t: &&dyn CatalogEntry| wanted.is_none_or(|role| t.roles().contains(&role));
    if args.json {
        let types: Vec<_> = registry
            .catalog()
            .iter()
            .filter(shown)
            .map(
                |t| serde_json::json!({"type": t.name(), "roles": t.roles(), "fields": t.fields()}),
            )
            .collect();
        let out =
            serde_json::json!({"resource_types": types, "handlers": registry.handler_names()});
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return 0;
    }
    for t in registry.catalog().iter().filter(shown) {
        let roles: Vec<&str> = t.roles().iter().map(|r| r.as_str()).collect();
        println!("{} ({})", t.name(), roles.join(", "));
        for f in t.fields() {
            let req = if f.required { " (required)" } else { "" };
            let def = f.default.map(|d| format!(" = {d}")).unwrap_or_default();
            println!("  {:<22} {:<8}{def}{req}  {}", f.name, f.kind, f.help);
        }
    }
    println!("handlers: {}", registry.handler_names().join(", "));
    0
}
