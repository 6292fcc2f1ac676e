//! `app.failure_capture`: `{directory, mode, max_bytes, redact_paths}`, checked as the
//! reference checks it (unknown keys refused with or without `--strict`).

use onestep_core::capture::{CaptureMode, FailureCaptureConfig};
use onestep_core::catalog::type_name;
use serde_json::Value;

use super::checker::Checker;

const PATH: &str = "app.failure_capture";

/// Reads `app.failure_capture`; `None` when it has problems (recorded in `c`).
pub fn failure_capture(value: &Value, c: &mut Checker<'_>) -> Option<FailureCaptureConfig> {
    let map = c.mapping(value, PATH)?;
    c.unknown_fields_always(
        map,
        &["directory", "mode", "max_bytes", "redact_paths"],
        PATH,
    );
    let directory = c.string(map, "directory", PATH);
    let mode = match map.get("mode") {
        None | Some(Value::Null) => Some(CaptureMode::Terminal),
        Some(Value::String(m)) if m == "terminal" => Some(CaptureMode::Terminal),
        Some(Value::String(m)) if m == "all" => Some(CaptureMode::All),
        Some(other) => {
            c.problem(
                &format!("{PATH}.mode"),
                format!("must be \"terminal\" or \"all\", got {other}"),
            );
            None
        }
    };
    let max_bytes = match map.get("max_bytes") {
        None | Some(Value::Null) => Some(1_048_576),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|b| b >= 1) => n.as_u64(),
        Some(other) => {
            c.problem(
                &format!("{PATH}.max_bytes"),
                format!("must be an integer >= 1, got {other}"),
            );
            None
        }
    };
    let redact_paths = match map.get("redact_paths") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| pointer(item, &format!("{PATH}.redact_paths[{i}]"), c))
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Option<Vec<String>>>(),
        Some(other) => {
            c.problem(
                &format!("{PATH}.redact_paths"),
                format!("expected a list of JSON Pointers, got {}", type_name(other)),
            );
            None
        }
    };
    Some(FailureCaptureConfig {
        directory: directory?.into(),
        mode: mode?,
        max_bytes: max_bytes?,
        redact_paths: redact_paths?,
    })
}

/// A JSON Pointer: `/` first, `~` only as `~0` or `~1`.
fn pointer(item: &Value, path: &str, c: &mut Checker<'_>) -> Option<String> {
    let valid = item.as_str().filter(|p| {
        p.starts_with('/')
            && p.split('~')
                .skip(1)
                .all(|rest| rest.starts_with('0') || rest.starts_with('1'))
    });
    if valid.is_none() {
        c.problem(
            path,
            format!("must be a JSON Pointer such as \"/body/card/number\", got {item}"),
        );
    }
    valid.map(str::to_owned)
}
