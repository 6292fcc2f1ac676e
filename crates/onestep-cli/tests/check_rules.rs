//! One broken configuration per rule of `check --strict`; each asserts the exact YAML path
//! (and line) of the problem and what was expected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use onestep_cli::Registry;
use onestep_cli::config::{self, LoadOptions};

mod common;

use common::{VALID, expect, problems};

#[test]
fn the_valid_config_has_no_problems() {
    assert_eq!(problems(VALID), Vec::new());
}

#[test]
fn unknown_fields_are_reported_at_every_level_with_their_line() {
    let yaml = VALID
        .replace("  name: demo\n", "  name: demo\n  colour: blue\n")
        .replace("kind: App\n", "kind: App\nextra: 1\n");
    let found = problems(&yaml);
    assert!(
        found.iter().any(|(p, m, line)| p == "app.colour"
            && m.starts_with("unknown field")
            && *line == Some(6)),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|(p, _, line)| p == "extra" && *line == Some(3)),
        "{found:?}"
    );
    expect(
        &VALID.replace(
            "    handler: onestep:echo\n",
            "    handler: onestep:echo\n    priority: 3\n",
        ),
        "tasks[0].priority",
        "unknown field",
    );
    expect(
        &VALID.replace("    maxsize: 10\n", "    maxsize: 10\n    colour: red\n"),
        "resources.queue.colour",
        "unsupported field for memory",
    );
    expect(
        &VALID.replace(
            "    handler: onestep:echo\n",
            "    handler:\n      ref: onestep:echo\n      args: {}\n",
        ),
        "tasks[0].handler.args",
        "unknown field",
    );
}

#[test]
fn api_version_and_kind_must_be_the_supported_pair() {
    expect(
        &VALID.replace("onestep/v1alpha1", "onestep/v2"),
        "apiVersion",
        "must be \"onestep/v1alpha1\"",
    );
    expect(
        &VALID.replace("kind: App", "kind: Job"),
        "kind",
        "must be \"App\"",
    );
    expect(
        &VALID.replace("kind: App\n", ""),
        "kind",
        "is required with apiVersion",
    );
}

#[test]
fn execution_source_options_follow_the_shared_rules() {
    let cases = [
        (
            "    namespace: demo\n",
            "    namespace: ''\n",
            "resources.jobs.namespace",
            "must be a non-empty string",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work, other]\n",
            "resources.jobs.task_names",
            "exactly one task name, got 2",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: []\n",
            "resources.jobs.task_names",
            "exactly one task name, got 0",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    batch_size: 0\n",
            "resources.jobs.batch_size",
            "must be an integer >= 1, got 0",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    poll_interval_s: 0\n",
            "resources.jobs.poll_interval_s",
            "must be a finite number > 0",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    lease_duration_s: -1\n",
            "resources.jobs.lease_duration_s",
            "must be a finite number > 0",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    lease_duration_s: 90\n    heartbeat_interval_s: 31\n",
            "resources.jobs.heartbeat_interval_s",
            "must be <= lease_duration_s / 3 (30), got 31",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    reclaim_batch_size: 0\n",
            "resources.jobs.reclaim_batch_size",
            ">= 1",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    auto_create: maybe\n",
            "resources.jobs.auto_create",
            "expected true or false",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    prefetch: lots\n",
            "resources.jobs.prefetch",
            "expected an integer >= 0 or `auto`, got \"lots\"",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    prefetch: -1\n",
            "resources.jobs.prefetch",
            "must be an integer >= 0, got -1",
        ),
        (
            "    task_names: [work]\n",
            "    task_names: [work]\n    prefetch: 10001\n",
            "resources.jobs.prefetch",
            "must be <= 10000 or `auto`, got 10001",
        ),
    ];
    for (from, to, path, message) in cases {
        expect(&VALID.replace(from, to), path, message);
    }
    for prefetch in ["0", "64", "auto"] {
        let yaml = VALID.replace(
            "    task_names: [work]\n",
            &format!("    task_names: [work]\n    prefetch: {prefetch}\n"),
        );
        assert_eq!(problems(&yaml), Vec::new(), "prefetch: {prefetch}");
    }
}

#[test]
fn retry_policies_reject_unknown_types_and_fields() {
    let with_retry = |retry: &str| {
        VALID.replace(
            "    handler: onestep:echo\n",
            &format!("    handler: onestep:echo\n    retry:\n{retry}"),
        )
    };
    expect(
        &with_retry("      type: forever\n"),
        "tasks[0].retry.type",
        "unknown retry type \"forever\"",
    );
    expect(
        &with_retry("      type: max_attempts\n      tries: 3\n"),
        "tasks[0].retry.tries",
        "unknown field",
    );
    expect(
        &with_retry("      type: max_attempts\n      max_attempts: 0\n"),
        "tasks[0].retry.max_attempts",
        "must be an integer >= 1, got 0",
    );
    expect(
        &with_retry(
            "      type: exponential_backoff\n      min_delay_s: 10\n      max_delay_s: 1\n",
        ),
        "tasks[0].retry.max_delay_s",
        "must be >= min_delay_s",
    );
    expect(
        &with_retry("      type: exponential_backoff\n      jitter: wild\n"),
        "tasks[0].retry.jitter",
        "must be one of none, full, equal",
    );
    expect(
        &with_retry("      type: by_failure_kind\n"),
        "tasks[0].retry",
        "needs at least one of",
    );
    expect(
        &with_retry("      type: by_failure_kind\n      timeout:\n        type: nope\n"),
        "tasks[0].retry.timeout.type",
        "unknown retry type",
    );
}

#[test]
fn tasks_need_a_registered_handler_or_emit_targets() {
    expect(
        &VALID.replace("    handler: onestep:echo\n", ""),
        "tasks[0].handler",
        "is required when the task has no emit targets",
    );
    // A Python-shaped ref is valid here (check imports it in Python, see tests/cli_python.rs);
    // anything else must be a registered Rust handler.
    assert_eq!(
        problems(&VALID.replace("onestep:echo", "app.handlers:missing")),
        Vec::new()
    );
    expect(
        &VALID.replace("onestep:echo", "app-handlers/missing"),
        "tasks[0].handler",
        "is neither a registered Rust handler",
    );
    let passthrough = VALID.replace("    handler: onestep:echo\n", "    emit: queue\n");
    assert_eq!(
        problems(&passthrough),
        Vec::new(),
        "emit without handler is a passthrough"
    );
}

#[test]
fn resource_types_and_references_must_exist() {
    expect(
        &VALID.replace("    type: memory\n", "    type: kafka\n"),
        "resources.queue.type",
        "unknown resource type \"kafka\"",
    );
    expect(
        &VALID.replace("    source: jobs\n", "    source: nowhere\n"),
        "tasks[0].source",
        "unknown resource \"nowhere\"",
    );
    expect(
        &VALID.replace("    source: jobs\n", "    source: db\n"),
        "tasks[0].source",
        "cannot be used as a source",
    );
    expect(
        &VALID.replace(
            "    handler: onestep:echo\n",
            "    handler: onestep:echo\n    emit: [jobs]\n",
        ),
        "tasks[0].emit[0]",
        "cannot be used as a sink",
    );
    expect(
        &VALID.replace("    maxsize: 10\n", ""),
        "resources.queue.maxsize",
        "is required",
    );
}

#[test]
fn task_fields_are_range_checked() {
    let t = |extra: &str| {
        VALID.replace(
            "    handler: onestep:echo\n",
            &format!("    handler: onestep:echo\n{extra}"),
        )
    };
    expect(
        &t("    concurrency: 0\n"),
        "tasks[0].concurrency",
        "must be an integer >= 1, got 0",
    );
    expect(
        &t("    timeout_s: 0\n"),
        "tasks[0].timeout_s",
        "must be a finite number > 0",
    );
    expect(
        &t("    metadata: [1]\n"),
        "tasks[0].metadata",
        "expected a mapping",
    );
    let twice = VALID.to_string() + "  - name: work\n    handler: onestep:echo\n    emit: queue\n";
    expect(&twice, "tasks[1].name", "duplicate task name");
}

#[test]
fn app_fields_are_checked() {
    expect(
        &VALID.replace(
            "  name: demo\n",
            "  name: demo\n  logging:\n    level: loud\n",
        ),
        "app.logging.level",
        "must be one of",
    );
    expect(
        &VALID.replace(
            "  name: demo\n",
            "  name: demo\n  logging:\n    format: xml\n",
        ),
        "app.logging.format",
        "must be text or json",
    );
    expect(
        &VALID.replace("  name: demo\n", "  name: demo\n  shutdown_timeout_s: 0\n"),
        "app.shutdown_timeout_s",
        "> 0",
    );
    expect(
        &VALID.replace("  name: demo\n", ""),
        "app.name",
        "is required",
    );
}

#[test]
fn schedules_and_connectors_are_checked() {
    let extra = |r: &str| VALID.replace("resources:\n", &format!("resources:\n{r}"));
    expect(
        &extra("  tick:\n    type: cron\n    expression: '0 24 * * *'\n"),
        "resources.tick.expression",
        "'hour' value 24 is out of range",
    );
    expect(
        &extra("  tick:\n    type: interval\n    seconds: 0\n"),
        "resources.tick",
        "interval must be greater than zero",
    );
    expect(
        &extra("  tick:\n    type: interval\n    seconds: 5\n    timezone: Mars/Base\n"),
        "resources.tick.timezone",
        "not a known IANA time zone",
    );
    expect(
        &extra("  tick:\n    type: interval\n    seconds: 5\n    overlap: sometimes\n"),
        "resources.tick.overlap",
        "allow, skip, queue",
    );
    expect(
        &extra("  pg:\n    type: postgres\n    dsn: oracle://x\n"),
        "resources.pg.dsn",
        "unsupported dsn scheme",
    );
}

#[test]
fn environment_interpolation_keeps_types_and_strict_env_lists_every_missing_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.yaml");
    let yaml = VALID
        .replace(
            "    task_names: [work]\n",
            "    task_names: [work]\n    batch_size: ${ONESTEP_TEST_BATCH:-25}\n",
        )
        .replace(
            "    namespace: demo\n",
            "    namespace: ${ONESTEP_TEST_SURELY_UNSET_NS}\n",
        );
    std::fs::write(&path, &yaml).unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "ONESTEP_TEST_SURELY_UNSET_NS=from-dotenv\n",
    )
    .unwrap();
    let doc = config::load(&path, &LoadOptions::default()).unwrap();
    assert_eq!(doc.value["resources"]["jobs"]["batch_size"], 25);
    assert_eq!(doc.value["resources"]["jobs"]["namespace"], "from-dotenv");
    std::fs::remove_file(dir.path().join(".env")).unwrap();
    let err = config::load(
        &path,
        &LoadOptions {
            strict_env: true,
            env_file: None,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("ONESTEP_TEST_SURELY_UNSET_NS (at resources.jobs.namespace)"),
        "{err}"
    );
}

#[test]
fn reference_features_this_port_lacks_are_errors_not_silently_dropped() {
    expect(
        &VALID.replace("kind: App\n", "kind: App\nreporter: true\n"),
        "reporter",
        "not supported by this port yet",
    );
    expect(
        &VALID.replace("    handler: onestep:echo\n", "    handler: null\n"),
        "tasks[0].handler",
        "is required when the task has no emit targets",
    );
}

#[test]
fn connector_references_and_table_names_are_checked_before_building() {
    expect(
        &VALID.replace("    connector: db\n", "    connector: nowhere\n"),
        "resources.jobs.connector",
        "unknown resource \"nowhere\"",
    );
    expect(
        &VALID.replace("    connector: db\n", "    connector: queue\n"),
        "resources.jobs.connector",
        "is not a connector",
    );
    let wrong_kind = VALID.replace(
        "    type: sqlite\n    dsn: sqlite://demo.db\n",
        "    type: postgres\n    dsn: postgres://x@h/db\n",
    );
    expect(
        &wrong_kind,
        "resources.jobs.connector",
        "must be a sqlite connector, got a postgres connector",
    );
    let bad_table = VALID.replace(
        "    task_names: [work]\n",
        "    task_names: [work]\n    table: 'jobs; drop table x'\n",
    );
    expect(
        &bad_table,
        "resources.jobs.table",
        "must be a non-empty SQL identifier",
    );
    let long = VALID.replace(
        "    task_names: [work]\n",
        &format!(
            "    task_names: [work]\n    attempts_table: {}\n",
            "a".repeat(64)
        ),
    );
    expect(
        &long,
        "resources.jobs.attempts_table",
        "at most 63 characters",
    );
}

#[test]
fn webhook_resources_are_checked_field_by_field() {
    let with = |fields: &str| {
        VALID.replace(
            "resources:\n",
            &format!("resources:\n  hook:\n    type: webhook\n{fields}"),
        )
    };
    assert_eq!(
        problems(&with("    path: /hooks/a\n    auth: {token: t}\n")),
        Vec::new()
    );
    expect(
        &with("    path: /hooks/a\n    parser: yaml\n"),
        "resources.hook.parser",
        "must be one of",
    );
    expect(
        &with("    path: /hooks/a\n    port: 70000\n"),
        "resources.hook.port",
        "must be a port number",
    );
    expect(
        &with("    path: /hooks/a\n    auth: {type: basic, token: t}\n"),
        "resources.hook.auth.type",
        "must be bearer",
    );
    expect(
        &with("    path: /hooks/a\n    response: {code: 200}\n"),
        "resources.hook.response.code",
        "unknown field",
    );
    expect(&with("    path: hooks\n"), "resources.hook.path", "");
}

/// The stock binary composes the catalogs of core, onestep-sql, onestep-http, onestep-redis,
/// onestep-rabbitmq and onestep-sqs, and each
/// type's documented fields are exactly the ones it reads.
#[test]
fn the_stock_catalog_has_every_crate_s_types_documented_as_read() {
    let registry = Registry::with_builtins();
    assert_eq!(
        registry.catalog().names(),
        [
            "cron",
            "http_fetcher",
            "http_sink",
            "interval",
            "memory",
            "mysql",
            "mysql_binlog",
            "mysql_cursor_store",
            "mysql_execution_source",
            "mysql_incremental",
            "mysql_state_store",
            "mysql_table_queue",
            "mysql_table_sink",
            "postgres",
            "postgres_cursor_store",
            "postgres_execution_source",
            "postgres_incremental",
            "postgres_state_store",
            "postgres_table_queue",
            "postgres_table_sink",
            "rabbitmq",
            "rabbitmq_queue",
            "redis",
            "redis_stream",
            "sns",
            "sns_topic",
            "sqlite",
            "sqlite_cursor_store",
            "sqlite_execution_source",
            "sqlite_incremental",
            "sqlite_state_store",
            "sqlite_table_queue",
            "sqlite_table_sink",
            "sqs",
            "sqs_queue",
            "webhook"
        ]
    );
    assert_eq!(registry.catalog().audit(), Vec::<String>::new());
}

/// The Redis types' fields are checked with the field at fault, as the reference names them.
#[test]
fn redis_fields_name_the_field_at_fault() {
    let with = |connector: &str, stream: &str| {
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp:\n  name: q\nresources:\n  \
             cache:\n    type: redis\n{connector}  jobs:\n    type: redis_stream\n    \
             connector: cache\n{stream}tasks:\n  - {{name: work, source: jobs, handler: \
             onestep:echo}}\n"
        )
    };
    let url = "    url: redis://127.0.0.1:6379/0\n";
    assert_eq!(
        problems(&with(
            &format!("{url}    options: {{password: x, db: 1, socket_timeout: 2.5}}\n"),
            "    stream: jobs\n    group: g\n    maxlen: 1000\n    block_ms: 500\n    reclaim_idle_s: 30\n"
        )),
        Vec::new()
    );
    expect(&with("", ""), "resources.cache.url", "");
    expect(
        &with("    url: http://x\n", ""),
        "resources.cache.url",
        "redis://",
    );
    expect(
        &with(
            &format!("{url}    options: {{decode_responses: true}}\n"),
            "",
        ),
        "resources.cache.options.decode_responses",
        "unsupported redis option",
    );
    expect(
        &with(url, "    batch_size: 0\n"),
        "resources.jobs.batch_size",
        "",
    );
    expect(
        &with(url, "    reclaim_idle_s: 0.01\n"),
        "resources.jobs.reclaim_idle_s",
        "at least 0.1",
    );
    expect(
        &with(url, "    queue: x\n"),
        "resources.jobs.queue",
        "unsupported field",
    );
}

/// The RabbitMQ types' fields are checked with the field at fault, as the reference names them.
#[test]
fn rabbitmq_fields_name_the_field_at_fault() {
    let with = |connector: &str, queue: &str| {
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp:\n  name: q\nresources:\n  \
             mq:\n    type: rabbitmq\n{connector}  jobs:\n    type: rabbitmq_queue\n    \
             connector: mq\n{queue}tasks:\n  - {{name: work, source: jobs, handler: \
             onestep:echo}}\n"
        )
    };
    let url = "    url: amqp://guest:guest@127.0.0.1:5672/%2f\n";
    assert_eq!(
        problems(&with(
            &format!(
                "{url}    options: {{heartbeat: 30, timeout: 5, client_properties: {{connection_name: w}}}}\n"
            ),
            "    queue: jobs\n    exchange: events\n    exchange_type: topic\n    routing_key: jobs.*\n    \
             arguments: {x-queue-type: quorum, x-max-length: 1000}\n    prefetch: 50\n    \
             publisher_confirms: false\n"
        )),
        Vec::new()
    );
    // The reference's spelling of the default exchange.
    assert_eq!(problems(&with(url, "    exchange: \"\"\n")), Vec::new());
    expect(&with("", ""), "resources.mq.url", "");
    expect(
        &with("    url: redis://x\n", ""),
        "resources.mq.url",
        "amqp://",
    );
    expect(
        &with(&format!("{url}    options: {{ssl: true}}\n"), ""),
        "resources.mq.options.ssl",
        "unsupported rabbitmq option",
    );
    expect(
        &with(url, "    prefetch: 70000\n"),
        "resources.jobs.prefetch",
        "65535",
    );
    expect(
        &with(url, "    batch_size: 0\n"),
        "resources.jobs.batch_size",
        "",
    );
    expect(
        &with(url, "    exchange: e\n    exchange_type: sideways\n"),
        "resources.jobs.exchange_type",
        "direct",
    );
    expect(
        &with(url, "    arguments: [1]\n"),
        "resources.jobs.arguments",
        "mapping",
    );
    expect(
        &with(url, "    stream: x\n"),
        "resources.jobs.stream",
        "unsupported field",
    );
}

/// The binlog source's fields are checked with the field at fault, its defaults accepted.
#[test]
fn binlog_fields_name_the_field_at_fault() {
    let with = |fields: &str| {
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp:\n  name: cdc\nresources:\n  \
             db: {{type: mysql, dsn: \"mysql://u@127.0.0.1/db\"}}\n  marks: {{type: \
             mysql_cursor_store, connector: db}}\n  changes:\n    type: mysql_binlog\n    \
             connector: db\n{fields}tasks:\n  - {{name: sync, source: changes, handler: \
             onestep:echo}}\n"
        )
    };
    assert_eq!(
        problems(&with(
            "    server_id: 4101\n    tables: [orders]\n    events: [write, update]\n    state: marks\n    blocking: true\n"
        )),
        Vec::new()
    );
    expect(&with(""), "resources.changes.server_id", "is required");
    expect(
        &with("    server_id: 0\n"),
        "resources.changes.server_id",
        "",
    );
    expect(
        &with("    server_id: 4294967296\n"),
        "resources.changes.server_id",
        "at most 4294967295",
    );
    expect(
        &with("    server_id: 7\n    events: [insert, truncate]\n"),
        "resources.changes.events[1]",
        "must be insert, update or delete",
    );
    expect(
        &with("    server_id: 7\n    events: []\n"),
        "resources.changes.events",
        "at least one",
    );
    expect(
        &with("    server_id: 7\n    tables: 5\n"),
        "resources.changes.tables",
        "expected a list of names",
    );
    expect(
        &with("    server_id: 7\n    state: db\n"),
        "resources.changes.state",
        "",
    );
    expect(
        &with("    server_id: 7\n    slot: x\n"),
        "resources.changes.slot",
        "unsupported field",
    );
}

/// References between resources are checked after every resource is read, with the messages
/// of the reference.
#[test]
fn connector_references_name_what_they_need() {
    let yaml = VALID.replace("connector: db", "connector: queue");
    assert_eq!(
        problems(&yaml),
        [(
            "resources.jobs.connector".to_string(),
            "resource \"queue\" of type memory is not a connector".to_string(),
            Some(11)
        )]
    );
    let yaml = VALID
        .replace("type: sqlite\n", "type: postgres\n")
        .replace("sqlite://demo.db", "postgres://u@127.0.0.1/db");
    assert_eq!(
        problems(&yaml)[0].1,
        "resource \"db\" must be a sqlite connector, got a postgres connector"
    );
    let yaml = VALID.replace("connector: db", "connector: nowhere");
    assert_eq!(
        problems(&yaml)[0].1,
        "unknown resource \"nowhere\"; define the connector under resources"
    );
}

#[test]
fn state_stores_and_app_state_are_checked() {
    let with_store = |app_state: &str, store: &str| {
        VALID
            .replace(
                "  name: demo\n",
                &format!("  name: demo\n  state: {app_state}\n"),
            )
            .replace("  queue:\n", &format!("{store}  queue:\n"))
    };
    let store = "  kv:\n    type: sqlite_state_store\n    connector: db\n    table: app_state\n";
    assert_eq!(problems(&with_store("kv", store)), Vec::new());
    let cursors = "  kv:\n    type: sqlite_cursor_store\n    connector: db\n";
    assert_eq!(problems(&with_store("queue", cursors))[0].0, "app.state");
    expect(
        &with_store("queue", store),
        "app.state",
        "resource \"queue\" of type memory cannot be used as a state_store",
    );
    expect(
        &with_store("missing", store),
        "app.state",
        "unknown resource \"missing\"",
    );
    expect(
        &with_store("kv", &store.replace("table: app_state", "table: app-state")),
        "resources.kv.table",
        "must be a non-empty SQL identifier",
    );
    expect(
        &with_store(
            "kv",
            &store.replace("table: app_state", "value_column: state_key"),
        ),
        "resources.kv.value_column",
        "must name another column than key_column",
    );
    expect(
        &with_store("kv", &store.replace("connector: db", "connector: queue")),
        "resources.kv.connector",
        "queue",
    );
    expect(
        &with_store(
            "kv",
            &store.replace("table: app_state", "auto_create: maybe"),
        ),
        "resources.kv.auto_create",
        "expected true or false",
    );
    expect(
        &with_store("kv", &store.replace("table: app_state", "tabel: x")),
        "resources.kv.tabel",
        "unsupported field for sqlite_state_store",
    );
}

#[test]
fn table_queues_are_checked_field_by_field() {
    let queue = "  tickets:\n    type: sqlite_table_queue\n    connector: db\n    table: tickets\n    \
                 key: id\n    where: \"status = 'new'\"\n    claim: {status: working}\n    \
                 ack: {status: done}\n    nack: {status: new}\n";
    let with = |resource: &str| VALID.replace("  queue:\n", &format!("{resource}  queue:\n"));
    assert_eq!(problems(&with(queue)), Vec::new());
    expect(
        &with(&queue.replace("claim: {status: working}", "claim: working")),
        "resources.tickets.claim",
        "expected a mapping of column: value, got a string",
    );
    expect(
        &with(&queue.replace("    ack: {status: done}\n", "")),
        "resources.tickets.ack",
        "is required (a mapping of column: value)",
    );
    expect(
        &with(&queue.replace("    where: \"status = 'new'\"\n", "")),
        "resources.tickets.where",
        "is required",
    );
    expect(
        &with(&queue.replace("key: id", "key: \"id; drop\"")),
        "resources.tickets.key",
        "must be a non-empty SQL identifier",
    );
    expect(
        &with(&queue.replace("nack: {status: new}", "nack: {\"st atus\": new}")),
        "resources.tickets.nack.st atus",
        "must be a non-empty SQL identifier",
    );
    expect(
        &with(&format!("{queue}    batch_size: 0\n")),
        "resources.tickets.batch_size",
        ">= 1",
    );
}

#[test]
fn incremental_sources_are_checked_field_by_field() {
    let source = "  changes:\n    type: sqlite_incremental\n    connector: db\n    table: orders\n    \
                  key: id\n    cursor: [updated_at]\n    state: marks\n  \
                  marks: {type: sqlite_cursor_store, connector: db}\n";
    let with = |resource: &str| VALID.replace("  queue:\n", &format!("{resource}  queue:\n"));
    assert_eq!(problems(&with(source)), Vec::new());
    expect(
        &with(&source.replace("cursor: [updated_at]", "cursor: []")),
        "resources.changes.cursor",
        "must contain at least one column",
    );
    expect(
        &with(&source.replace("cursor: [updated_at]", "cursor: [\"updated at\"]")),
        "resources.changes.cursor[0]",
        "must be a non-empty SQL identifier",
    );
    expect(
        &with(&source.replace("    cursor: [updated_at]\n", "")),
        "resources.changes.cursor",
        "is required",
    );
    expect(
        &with(&source.replace("state: marks", "state: queue")),
        "resources.changes.state",
        "cannot be used as a cursor_store",
    );
    expect(
        &with(&source.replace("state: marks", "state: nowhere")),
        "resources.changes.state",
        "unknown resource \"nowhere\"",
    );
}

#[test]
fn table_sinks_are_checked_field_by_field() {
    let sink = "  rows:\n    type: sqlite_table_sink\n    connector: db\n    table: results\n    \
                mode: upsert\n    keys: [id]\n    update_columns: [name, {name: score, policy: \
                backfill}]\n";
    let with = |resource: &str| VALID.replace("  queue:\n", &format!("{resource}  queue:\n"));
    assert_eq!(problems(&with(sink)), Vec::new());
    expect(
        &with(&sink.replace("mode: upsert", "mode: merge")),
        "resources.rows.mode",
        "must be one of insert, upsert, update; got \"merge\"",
    );
    expect(
        &with(&sink.replace("    keys: [id]\n", "")),
        "resources.rows.keys",
        "are required in upsert mode",
    );
    expect(
        &with(&sink.replace("policy: backfill", "policy: sometimes")),
        "resources.rows.update_columns[1].policy",
        "must be one of overwrite, skip_null, backfill",
    );
    expect(
        &with(&format!("{sink}    serialize_json: maybe\n")),
        "resources.rows.serialize_json",
        "must be one of auto, always, never",
    );
    expect(
        &with(&sink.replace("mode: upsert", "mode: insert").replace(
            "    keys: [id]\n",
            "    update_expr: {score: \"score + 1\"}\n",
        )),
        "resources.rows.update_expr",
        "only applies to upsert or update mode",
    );
}

/// The SQS and SNS types' fields are checked with the field at fault, as the reference names
/// them.
#[test]
fn sqs_fields_name_the_field_at_fault() {
    let with = |connector: &str, queue: &str| {
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp:\n  name: q\nresources:\n  \
             aws:\n    type: sqs\n{connector}  jobs:\n    type: sqs_queue\n    \
             connector: aws\n{queue}  topic:\n    type: sns\n  events:\n    type: sns_topic\n    \
             connector: topic\n    arn: arn:aws:sns:eu-west-1:123456789012:events\n    \
             message_attributes: {{tenant: {{DataType: String, StringValue: acme}}}}\n\
             tasks:\n  - {{name: work, source: jobs, handler: onestep:echo, emit: [events]}}\n"
        )
    };
    let url = "    url: https://sqs.eu-west-1.amazonaws.com/123456789012/jobs\n";
    let region = "    region_name: eu-west-1\n";
    assert_eq!(
        problems(&with(
            &format!(
                "{region}    options: {{endpoint_url: http://127.0.0.1:5000, aws_access_key_id: a, aws_secret_access_key: b}}\n"
            ),
            &format!(
                "{url}    wait_time_s: 10\n    visibility_timeout: 60\n    batch_size: 5\n    \
             on_fail: release\n    delete_batch_size: 10\n    delete_flush_interval_s: 0.2\n    \
             heartbeat_interval_s: 20\n"
            )
        )),
        Vec::new()
    );
    expect(&with(region, ""), "resources.jobs.url", "");
    expect(
        &with(&format!("{region}    options: {{verify: false}}\n"), url),
        "resources.aws.options.verify",
        "verified",
    );
    expect(
        &with(
            &format!("{region}    options: {{aws_access_key_id: a}}\n"),
            url,
        ),
        "resources.aws.options.aws_secret_access_key",
        "required",
    );
    expect(
        &with(region, &format!("{url}    batch_size: 11\n")),
        "resources.jobs.batch_size",
        "between 1 and 10",
    );
    expect(
        &with(region, &format!("{url}    wait_time_s: 21\n")),
        "resources.jobs.wait_time_s",
        "0..=20",
    );
    expect(
        &with(region, &format!("{url}    on_fail: retry\n")),
        "resources.jobs.on_fail",
        "leave, release, delete",
    );
    expect(
        &with(
            region,
            &format!("{url}    deduplication_id_factory: app.ids:dedup\n"),
        ),
        "resources.jobs.deduplication_id_factory",
        "onestep_sqs:envelope_digest",
    );
    expect(
        &with(
            region,
            &format!("{url}    visibility_timeout: 10\n    heartbeat_interval_s: 10\n"),
        ),
        "resources.jobs.heartbeat_interval_s",
        "shorter",
    );
    expect(
        &with(region, &format!("{url}    stream: x\n")),
        "resources.jobs.stream",
        "unsupported field",
    );
}

/// The HTTP types' fields are checked with the field at fault, as the reference names them.
#[test]
fn http_sink_and_fetcher_fields_name_the_field_at_fault() {
    let with = |sink: &str, fetcher: &str| {
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp:\n  name: q\nresources:\n  \
             jobs:\n    type: memory\n    maxsize: 10\n  out:\n    type: http_sink\n{sink}  \
             api:\n    type: http_fetcher\n{fetcher}tasks:\n  - {{name: work, source: jobs, \
             handler: onestep:echo, emit: [out]}}\n"
        )
    };
    let sink = "    url: https://hooks.example.com/{{ body.id }}\n";
    let fetcher = "    url: https://api.example.com/items\n";
    assert_eq!(
        problems(&with(
            &format!(
                "{sink}    method: put\n    headers: {{Authorization: Bearer x, X-Id: \"{{{{ body.id }}}}\"}}\n    \
             params: {{a: 1}}\n    body: {{id: \"{{{{ body.id }}}}\", list: [1, 2]}}\n    timeout_s: 2.5\n    \
             success_statuses: [200, 409]\n"
            ),
            &format!("{fetcher}    params: {{page: 1}}\n")
        )),
        Vec::new()
    );
    expect(&with("", fetcher), "resources.out.url", "");
    expect(
        &with("    url: ftp://x/y\n", fetcher),
        "resources.out.url",
        "http or https",
    );
    expect(
        &with(&format!("{sink}    timeout_s: 0\n"), fetcher),
        "resources.out.timeout_s",
        "",
    );
    expect(
        &with(
            &format!("{sink}    success_statuses: [200, 700]\n"),
            fetcher,
        ),
        "resources.out.success_statuses[1]",
        "HTTP status",
    );
    expect(
        &with(&format!("{sink}    success_statuses: []\n"), fetcher),
        "resources.out.success_statuses",
        "must not be empty",
    );
    expect(
        &with(&format!("{sink}    headers: [1]\n"), fetcher),
        "resources.out.headers",
        "mapping",
    );
    expect(
        &with(sink, &format!("{fetcher}    rows: app.rows:extract\n")),
        "resources.api.rows",
        "Python",
    );
    expect(
        &with(&format!("{sink}    retries: 3\n"), fetcher),
        "resources.out.retries",
        "unsupported field",
    );
}
