//! `onestep catalog [--json]`.

use crate::registry::Registry;

/// Arguments of `catalog`.
#[derive(Debug, clap::Args)]
pub struct CatalogArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints every resource type and handler.
pub fn catalog(args: CatalogArgs, registry: &Registry) -> u8 {
    if args.json {
        let types: Vec<_> = registry
            .catalog()
            .iter()
            .map(
                |t| serde_json::json!({"type": t.name(), "roles": t.roles(), "fields": t.fields()}),
            )
            .collect();
        let out =
            serde_json::json!({"resource_types": types, "handlers": registry.handler_names()});
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return 0;
    }
    for t in registry.catalog().iter() {
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
