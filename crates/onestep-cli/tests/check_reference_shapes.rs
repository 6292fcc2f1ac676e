//! `check` rules of the reference's shapes beyond resources and handlers: task and app `hooks`,
//! emit `{sink, transform}` bindings and `{when, then, otherwise}` routes, `app.failure_capture`,
//! the legacy top-level form. Each broken file names the exact YAML path and what was expected;
//! unknown keys are refused strict or not where the reference refuses them when it builds the
//! app.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{VALID, expect, problems};

fn with_emit(emit: &str) -> String {
    VALID.replace(
        "    handler: onestep:echo\n",
        &format!("    handler: onestep:echo\n    emit: {emit}\n"),
    )
}

#[test]
fn hooks_routes_and_transforms_in_every_reference_shape_are_valid() {
    let yaml = VALID.replace("kind: App\n", "kind: App\nhooks:\n  startup: app.h:up\n  shutdown: [app.h:down, {ref: app.h:down2, params: {x: 1}}]\n  events: {ref: app.h:ev}\n")
        .replace(
            "    handler: onestep:echo\n",
            "    handler: onestep:echo\n    hooks:\n      before: app.h:b\n      after_success: [app.h:a]\n      on_failure: {ref: app.h:f, params: {to: ops}}\n    emit:\n      - queue\n      - {sink: queue, transform: app.t:shape}\n      - when: app.t:big\n        then: [queue, {sink: queue, transform: {ref: app.t:s, params: {n: 2}}}]\n        otherwise: queue\n      - {when: app.t:small, then: queue}\n",
        );
    assert_eq!(problems(&yaml), Vec::new());
}

#[test]
fn a_ref_that_is_neither_registered_nor_python_is_refused_where_it_is_written() {
    expect(
        &with_emit("[{sink: queue, transform: shape}]"),
        "tasks[0].emit[0].transform",
        "\"shape\" is neither a registered Rust callback (none registered) nor a Python ref",
    );
    expect(
        &with_emit("[{sink: queue, transform: {ref: 'not a ref'}}]"),
        "tasks[0].emit[0].transform.ref",
        "nor a Python ref 'package.module:attr'",
    );
    expect(
        &VALID.replace(
            "kind: App\n",
            "kind: App\nhooks: {startup: [app.h:up, 42]}\n",
        ),
        "hooks.startup[1]",
        "expected a ref string or {ref, params}, got",
    );
    expect(
        &with_emit("[{sink: queue, transform: {ref: app.t:s, params: [1]}}]"),
        "tasks[0].emit[0].transform.params",
        "expected a mapping",
    );
}

#[test]
fn routes_need_when_and_then_and_name_sinks() {
    expect(
        &with_emit("[{when: app.t:big}]"),
        "tasks[0].emit[0].then",
        "is required in an emit route",
    );
    expect(
        &with_emit("[{then: queue, otherwise: queue}]"),
        "tasks[0].emit[0].when",
        "is required in an emit route",
    );
    expect(
        &with_emit("[{when: app.t:big, then: []}]"),
        "tasks[0].emit[0].then",
        "must not be empty",
    );
    expect(
        &with_emit("[{when: app.t:big, then: [nowhere]}]"),
        "tasks[0].emit[0].then[0]",
        "unknown resource \"nowhere\"",
    );
    expect(
        &with_emit("[{when: app.t:big, then: queue, otherwise: {sink: jobs}}]"),
        "tasks[0].emit[0].otherwise.sink",
        "cannot be used as a sink",
    );
    expect(
        &with_emit("[[queue]]"),
        "tasks[0].emit[0]",
        "expected a sink name, {sink, transform} or {when, then, otherwise}",
    );
    expect(
        &with_emit("[{transform: app.t:shape}]"),
        "tasks[0].emit[0].sink",
        "is required",
    );
}

#[test]
fn unknown_hook_and_binding_keys_are_refused_even_without_strict() {
    let typo = VALID.replace(
        "    handler: onestep:echo\n",
        "    handler: onestep:echo\n    hooks: {befor: app.h:b}\n",
    );
    expect(
        &typo,
        "tasks[0].hooks.befor",
        "unknown field; expected one of: before, after_success, on_failure",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.yaml");
    std::fs::write(&path, &typo).unwrap();
    let doc =
        onestep_cli::config::load(&path, &onestep_cli::config::LoadOptions::default()).unwrap();
    let lenient =
        onestep_cli::config::spec::validate(&doc, &onestep_cli::Registry::with_builtins(), false);
    assert!(lenient.is_err(), "a misspelt hook is never ignored");
    expect(
        &VALID.replace("kind: App\n", "kind: App\nhooks: {on_start: app.h:up}\n"),
        "hooks.on_start",
        "expected one of: startup, shutdown, events",
    );
    expect(
        &with_emit("[{sink: queue, transfrom: app.t:shape}]"),
        "tasks[0].emit[0].transfrom",
        "expected one of: sink, transform",
    );
    expect(
        &with_emit("[{when: app.t:big, then: queue, else: queue}]"),
        "tasks[0].emit[0].else",
        "expected one of: when, then, otherwise",
    );
}

#[test]
fn a_registered_rust_callback_is_accepted_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.yaml");
    std::fs::write(&path, with_emit("[{sink: queue, transform: shape}]")).unwrap();
    let doc =
        onestep_cli::config::load(&path, &onestep_cli::config::LoadOptions::default()).unwrap();
    let mut registry = onestep_cli::Registry::with_builtins();
    registry.callback("shape", |_ctx, args, _params| async move {
        Ok(serde_json::json!({"shaped": args}))
    });
    let spec = onestep_cli::config::spec::validate(&doc, &registry, true).unwrap();
    assert!(spec.tasks[0].targets.len() == 1);
}

/// Rust callbacks run where the YAML names them: the predicate's JSON truth picks the branch,
/// the transform gets `[payload, result]` and the params, the before hook `[payload]`.
#[test]
fn registered_rust_callbacks_run_as_hooks_predicates_and_transforms() {
    use std::sync::{Arc, Mutex};
    let yaml = "apiVersion: onestep/v1alpha1
kind: App
app: {name: rusty}
resources:
  tick: {type: interval, seconds: 60, immediate: true, payload: {n: 1}}
  yes: {type: memory, maxsize: 10}
  no: {type: memory, maxsize: 10}
tasks:
  - name: work
    source: tick
    handler: onestep:echo
    hooks: {before: seen}
    emit:
      - when: empty_list
        then: [{sink: yes, transform: record}]
        otherwise: [{sink: no, transform: {ref: record, params: {branch: otherwise}}}]
";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.yaml");
    std::fs::write(&path, yaml).unwrap();
    let doc =
        onestep_cli::config::load(&path, &onestep_cli::config::LoadOptions::default()).unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut registry = onestep_cli::Registry::with_builtins();
    let seen = calls.clone();
    registry.callback("seen", move |ctx, args, _params| {
        let seen = seen.clone();
        async move {
            let task = ctx.map(|c| c.task_name().to_owned());
            seen.lock()
                .unwrap()
                .push(serde_json::json!({"before": args, "task": task}));
            Ok(serde_json::Value::Null)
        }
    });
    registry.callback("empty_list", |_ctx, _args, _params| async {
        Ok(serde_json::json!([]))
    });
    let recorded = calls.clone();
    registry.callback("record", move |_ctx, args, params| {
        let recorded = recorded.clone();
        async move {
            let entry = serde_json::json!({"transform": args, "params": *params});
            recorded.lock().unwrap().push(entry.clone());
            Ok(entry)
        }
    });
    let spec = onestep_cli::config::spec::validate(&doc, &registry, true).unwrap();
    let app = onestep_cli::config::build::build_app(
        &spec,
        &registry,
        &onestep_cli::config::build::BuildOptions::default(),
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let handle = app.handle();
        let worker = tokio::spawn(async move { app.serve().await });
        for _ in 0..500 {
            if calls.lock().unwrap().len() >= 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        handle.request_shutdown();
        worker.await.unwrap().unwrap();
    });
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [
            serde_json::json!({"before": [{"n": 1}], "task": "work"}),
            serde_json::json!({
                "transform": [{"n": 1}, {"n": 1}],
                "params": {"branch": "otherwise"},
            }),
        ]
    );
}

#[test]
fn failure_capture_fields_are_checked() {
    let with = |capture: &str| {
        VALID.replace(
            "  name: demo\n",
            &format!("  name: demo\n  failure_capture: {capture}\n"),
        )
    };
    assert_eq!(
        problems(&with(
            "{directory: caps, mode: all, max_bytes: 10, redact_paths: [/body/a~1b]}"
        )),
        Vec::new()
    );
    expect(
        &with("{mode: all}"),
        "app.failure_capture.directory",
        "is required",
    );
    expect(
        &with("{directory: c, mode: some}"),
        "app.failure_capture.mode",
        "must be \"terminal\" or \"all\"",
    );
    expect(
        &with("{directory: c, max_bytes: 0}"),
        "app.failure_capture.max_bytes",
        "must be an integer >= 1, got 0",
    );
    expect(
        &with("{directory: c, redact_paths: [card]}"),
        "app.failure_capture.redact_paths[0]",
        "must be a JSON Pointer",
    );
    expect(
        &with("{directory: c, redact_paths: [/a~2]}"),
        "app.failure_capture.redact_paths[0]",
        "JSON Pointer",
    );
    expect(
        &with("{directory: c, dir: d}"),
        "app.failure_capture.dir",
        "unknown field",
    );
    expect(&with("[c]"), "app.failure_capture", "expected a mapping");
}

#[test]
fn the_legacy_form_reads_as_the_reference_reads_it() {
    let legacy = "apiVersion: onestep/v1alpha1
kind: App
name: old
shutdown_timeout_s: 5
config: {region: eu}
connectors:
  db: {type: sqlite, dsn: sqlite://demo.db}
sources:
  jobs: {type: sqlite_execution_source, connector: db, namespace: demo, task_names: [work]}
sinks:
  queue: {type: memory, maxsize: 10}
resources:
  queue: {type: memory, maxsize: 10}
tasks:
  - name: work
    source: jobs
    handler: onestep:echo
    emit: queue
";
    assert_eq!(problems(legacy), Vec::new());
    let clash = legacy.replace(
        "sinks:\n  queue: {type: memory, maxsize: 10}",
        "sinks:\n  queue: {type: memory, maxsize: 11}",
    );
    expect(
        &clash,
        "sinks.queue",
        "is defined multiple times with different configs",
    );
    expect(
        &VALID.replace("kind: App\n", "kind: App\nstate: s\n"),
        "app",
        "strict mode does not allow mixing 'app' with legacy top-level app fields: state",
    );
    expect(
        &VALID.replace("  name: demo\n", "  name: demo\n  config: [1]\n"),
        "app.config",
        "expected a mapping, got a list",
    );
}
