//! `onestep render [--format mermaid] FILE`: the worker's topology as the reference's Mermaid
//! flowchart (`onestep.render.render_mermaid`), line for line: a node per task and per source
//! or sink (named as at runtime, labelled with the reference's class), an edge per source,
//! emit binding, route branch and dead letter.

use std::collections::HashMap;

use onestep_core::catalog::BuildContext;

use crate::config::emit::{BindingSpec, EmitSpec};
use crate::config::spec::RetrySpec;
use crate::config::{self, AppSpec};
use crate::registry::Registry;

/// Arguments of `render`.
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    #[command(flatten)]
    load: super::LoadArgs,
    /// The diagram format.
    #[arg(long, value_parser = ["mermaid"], default_value = "mermaid")]
    format: String,
}

/// Prints the diagram: 0, or 1 when the file has problems, 2 when it cannot be loaded.
pub fn render(args: &RenderArgs, registry: &Registry) -> u8 {
    let spec = match args.load.spec(registry, 1) {
        Ok(spec) => spec,
        Err(code) => return code,
    };
    match mermaid(&spec, registry) {
        Ok(text) => {
            print!("{text}");
            0
        }
        Err(e) => {
            eprintln!("onestep: {}: {e}", args.load.file.display());
            1
        }
    }
}

/// The Mermaid `graph LR` chart of `spec`.
pub fn mermaid(spec: &AppSpec, registry: &Registry) -> Result<String, String> {
    let mut ctx = BuildContext::new(registry.catalog(), &spec.resources);
    let mut nodes = Nodes::default();
    let mut edges = Vec::new();
    let mut resource = |name: &str, as_sink: bool, nodes: &mut Nodes| -> Result<String, String> {
        let runtime_name = if as_sink {
            ctx.sink(name).map(|s| s.name().to_owned())
        } else {
            ctx.source(name).map(|s| s.name().to_owned())
        }
        .map_err(|e| format!("resource {name:?}: {e}"))?;
        let class = spec
            .resources
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| registry.catalog().get(&r.type_name))
            .map_or(name, |t| t.class_name());
        Ok(nodes.resource(&runtime_name, class))
    };
    for t in &spec.tasks {
        let task = nodes.task(&t.name, &task_meta(t));
        if let Some(source) = &t.source {
            let node = resource(source, false, &mut nodes)?;
            edges.push(format!("  {node} --> {task}"));
        }
        // Routes first (a plain sink name is a route without a predicate, as the reference
        // normalizes it), then the `{sink, transform}` bindings.
        for target in &t.targets {
            let (prefix, then, otherwise) = match target {
                EmitSpec::Route {
                    when,
                    then,
                    otherwise,
                } => (format!("when {}", when.reference), then, otherwise),
                EmitSpec::Binding(b) if b.transform.is_none() => {
                    ("emit".to_owned(), &vec![b.clone()], &Vec::new())
                }
                EmitSpec::Binding(_) => continue,
            };
            for (bindings, prefix) in [(then, prefix.as_str()), (otherwise, "otherwise")] {
                for b in bindings {
                    let node = resource(&b.sink, true, &mut nodes)?;
                    edges.push(format!("  {task} -->|{}| {node}", label(prefix, b)));
                }
            }
        }
        for target in &t.targets {
            if let EmitSpec::Binding(b) = target
                && b.transform.is_some()
            {
                let node = resource(&b.sink, true, &mut nodes)?;
                edges.push(format!("  {task} -->|{}| {node}", label("emit", b)));
            }
        }
        for d in &t.dead_letter {
            let node = resource(d, true, &mut nodes)?;
            edges.push(format!("  {task} -.->|\"dead_letter\"| {node}"));
        }
    }
    let mut lines = vec![
        "graph LR".to_owned(),
        format!("  %% app: {}", spec.name.replace('\n', " ")),
    ];
    lines.extend(
        nodes
            .labels
            .iter()
            .map(|(id, label)| format!("  {id}[\"{label}\"]")),
    );
    lines.extend(edges);
    Ok(lines.join("\n") + "\n")
}

/// An edge label: the prefix and the transform's ref, quoted.
fn label(prefix: &str, binding: &BindingSpec) -> String {
    let text = match &binding.transform {
        Some(t) => format!("{prefix} · {}", t.reference),
        None => prefix.to_owned(),
    };
    format!("\"{}\"", escape(&text))
}

/// `concurrency=N · retry=Class[ · timeout=Ns]`.
fn task_meta(t: &config::spec::TaskSpec) -> String {
    let retry = match &t.retry {
        RetrySpec::None => "NoRetry",
        RetrySpec::MaxAttempts { .. } => "MaxAttempts",
        RetrySpec::Exponential { .. } => "ExponentialBackoff",
        RetrySpec::ByFailureKind { .. } => "ByFailureKind",
    };
    let mut meta = format!("concurrency={} · retry={retry}", t.concurrency);
    if let Some(timeout) = t.timeout_s {
        meta.push_str(&format!(" · timeout={}s", format_g(timeout)));
    }
    meta
}

/// Node ids `n0`, `n1`, … in first-use order; resources deduplicated by name and class.
#[derive(Default)]
struct Nodes {
    ids: HashMap<(bool, String, String), String>,
    labels: Vec<(String, String)>,
}

impl Nodes {
    fn resource(&mut self, name: &str, class: &str) -> String {
        let label = format!("{}<br/>{}", escape(name), escape(class));
        self.register((false, name.to_owned(), class.to_owned()), label)
    }

    fn task(&mut self, name: &str, meta: &str) -> String {
        let label = format!("{}<br/>{meta}", escape(name));
        self.register((true, name.to_owned(), String::new()), label)
    }

    fn register(&mut self, key: (bool, String, String), label: String) -> String {
        if let Some(id) = self.ids.get(&key) {
            return id.clone();
        }
        let id = format!("n{}", self.labels.len());
        self.ids.insert(key, id.clone());
        self.labels.push((id.clone(), label));
        id
    }
}

/// The reference's escaping of Mermaid label text.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('|', "&#124;")
}

/// A number as Python's `f"{value:g}"` writes it: six significant digits, no trailing zeros,
/// exponent form below 1e-4 and from 1e6.
fn format_g(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return if value == 0.0 {
            "0".into()
        } else {
            value.to_string()
        };
    }
    let exponent = value.abs().log10().floor() as i32;
    let rounded: f64 = format!("{value:.5e}").parse().unwrap_or(value);
    let exponent = if rounded.abs() >= 10f64.powi(exponent + 1) {
        exponent + 1
    } else {
        exponent
    };
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exponent) {
        let text = format!("{value:.5e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim(mantissa.to_owned()), exp.abs());
    }
    let decimals = usize::try_from(5 - exponent).unwrap_or(0);
    trim(format!("{value:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_python_g() {
        for (value, text) in [
            (120.0, "120"),
            (0.5, "0.5"),
            (1.25, "1.25"),
            (1800.0, "1800"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (2.0 / 3.0, "0.666667"),
            (999999.5, "1e+06"),
        ] {
            assert_eq!(format_g(value), text, "{value}");
        }
    }

    #[test]
    fn labels_escape_what_mermaid_would_read() {
        assert_eq!(escape("a<b>|\"&"), "a&lt;b&gt;&#124;&quot;&amp;");
    }
}
