//! Property-based fuzzing of the configuration loader: the YAML parser (`config::yaml::parse`),
//! `config::load` on arbitrary and mutated example configs (followed by `config::spec::validate`),
//! `${VAR}` interpolation (`config::env::interpolate`) and `.env` files
//! (`Environment::load_dotenv`). Hostile input must give an error, never a panic, and what is
//! accepted must mean what the documentation says.
//!
//! The default run is short (proptest's 256 cases per property). For a longer run:
//!
//! ```text
//! PROPTEST_CASES=20000 cargo test -p onestep-cli --release --test fuzz
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)] // reason: a test fails loudly on bad fixtures

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use onestep_cli::Registry;
use onestep_cli::config::env::{Environment, interpolate};
use onestep_cli::config::{self, LoadError, LoadOptions, yaml};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The example configurations shipped in the repository: the seeds for mutation.
const EXAMPLES: [&str; 3] = [
    include_str!("../../../examples/sqlite-worker.yaml"),
    include_str!("../../../examples/postgres-worker.yaml"),
    include_str!("../../../examples/mysql-worker.yaml"),
];

/// A minimal config in flow style, a different shape to mutate.
const FLOW: &str = "apiVersion: onestep/v1alpha1\nkind: App\napp: {name: x, strict_env: false}\nresources:\n  q: {type: memory, maxsize: 1}\ntasks:\n  - {name: t, source: q, handler: onestep:echo, retry: {type: max_attempts, max_attempts: 3}}\n";

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

/// Fragments that matter to a YAML scanner: indicators, anchors, tags, block scalars,
/// directives, quotes, odd whitespace and line breaks, plus `${...}` syntax.
fn yaml_token() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "\n", "\r\n", "\r", "  ", "\t", "- ", "-", ": ", ":", "? ", "[", "]", "{", "}", ",",
            "#", " #", "&a ", "*a", "!!str ", "!!int ", "!!binary ", "!custom ", "!<tag:x> ", "|",
            "|-", ">+", ">2", "'", "''", "\"", "\\", "\\u00", "\\x", "---\n", "...\n", "%YAML 1.2\n",
            "%TAG ! tag:x,2024:\n", "<<: ", "~", "null", "true", "yes", "0x1F", "0o17", "-.inf",
            ".NaN", "1e309", "99999999999999999999", "-0", "0.", "1_000", "${", "}", "${X}",
            "${X:-d}", "${:-}", "\u{0}", "\u{85}", "\u{2028}", "\u{feff}", "\u{7f}", "é", "😀",
            "apiVersion", "kind", "app", "tasks", "resources", "name", "env_file", "strict_env",
        ])
        .prop_map(str::to_owned),
        1 => "[a-z0-9 ]{1,6}",
        1 => ".{1,3}",
    ]
    .boxed()
}

fn yaml_soup() -> BoxedStrategy<String> {
    prop::collection::vec(yaml_token(), 0..40)
        .prop_map(|tokens| tokens.concat())
        .boxed()
}

/// One edit of a configuration text.
#[derive(Debug, Clone)]
enum Mutation {
    /// Remove line `n`.
    DeleteLine(usize),
    /// Repeat line `n` (duplicate keys, repeated list items).
    DuplicateLine(usize),
    /// Swap two lines.
    SwapLines(usize, usize),
    /// Change the indentation of line `n` by this many spaces (negative removes).
    Indent(usize, i8),
    /// Insert a token at a character position.
    Insert(usize, String),
    /// Replace the character at a position with a token.
    Replace(usize, String),
    /// Cut the text at a character position.
    Truncate(usize),
}

fn mutation() -> BoxedStrategy<Mutation> {
    prop_oneof![
        1 => any::<usize>().prop_map(Mutation::DeleteLine),
        1 => any::<usize>().prop_map(Mutation::DuplicateLine),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        1 => (any::<usize>(), -4i8..5).prop_map(|(n, by)| Mutation::Indent(n, by)),
        2 => (any::<usize>(), yaml_token()).prop_map(|(at, t)| Mutation::Insert(at, t)),
        2 => (any::<usize>(), yaml_token()).prop_map(|(at, t)| Mutation::Replace(at, t)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
    .boxed()
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_owned();
    for mutation in mutations {
        let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
        let n = lines.len();
        let mut chars: Vec<char> = text.chars().collect();
        let c = chars.len();
        text = match mutation {
            Mutation::DeleteLine(i) => {
                lines.remove(i % n);
                lines.join("\n")
            }
            Mutation::DuplicateLine(i) => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
                lines.join("\n")
            }
            Mutation::SwapLines(a, b) => {
                lines.swap(a % n, b % n);
                lines.join("\n")
            }
            Mutation::Indent(i, by) => {
                let line = &mut lines[i % n];
                if *by >= 0 {
                    line.insert_str(0, &" ".repeat(by.unsigned_abs().into()));
                } else {
                    let strip = line
                        .chars()
                        .take(by.unsigned_abs().into())
                        .take_while(|ch| *ch == ' ')
                        .count();
                    line.drain(..strip);
                }
                lines.join("\n")
            }
            Mutation::Insert(at, token) => {
                let at = at % (c + 1);
                chars.splice(at..at, token.chars());
                chars.into_iter().collect()
            }
            Mutation::Replace(at, token) if c > 0 => {
                let at = at % c;
                chars.splice(at..=at, token.chars());
                chars.into_iter().collect()
            }
            Mutation::Truncate(at) => {
                chars.truncate(at % (c + 1));
                chars.into_iter().collect()
            }
            Mutation::Replace(..) => text,
        };
    }
    text
}

/// Example configs with one to four edits, or YAML token soup.
fn config_text() -> BoxedStrategy<String> {
    let seeds: Vec<&'static str> = EXAMPLES.iter().copied().chain([FLOW]).collect();
    prop_oneof![
        3 => (prop::sample::select(seeds), prop::collection::vec(mutation(), 1..5))
            .prop_map(|(seed, edits)| mutate(seed, &edits)),
        1 => yaml_soup(),
    ]
    .boxed()
}

/// Strings full of `${...}` syntax: nested, unterminated, empty, with defaults and unicode.
fn template() -> BoxedStrategy<String> {
    let piece = prop_oneof![
        4 => prop::sample::select(vec![
            "${", "}", "$", "{", ":-", ":", "${A}", "${B}", "${UNSET}", "${ A }", "${A:-x}",
            "${UNSET:-7}", "${UNSET:-true}", "${UNSET:-null}", "${UNSET:}", "${UNSET:-}",
            "${UNSET:-{\"a\":1}}", "${:-x}", "${}", "${${A}}", "$${A}", "${A:-${B}}", "${é}",
            "${😀:-😀}", "\u{0}", "é", " ", "x",
        ])
        .prop_map(str::to_owned),
        1 => ".{1,3}",
    ];
    prop::collection::vec(piece, 0..8)
        .prop_map(|pieces| pieces.concat())
        .boxed()
}

/// A JSON document whose strings are templates.
fn templated_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        4 => template().prop_map(Value::String),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => any::<i64>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z.\\[]{0,4}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Variables: the names the templates use, with values that are JSON, text or templates.
fn variables() -> BoxedStrategy<BTreeMap<String, String>> {
    let name = prop::sample::select(vec!["A", "B", "é", "😀", "", " A "]).prop_map(str::to_owned);
    let value = prop_oneof![
        prop::sample::select(vec![
            "1",
            "-2.5",
            "true",
            "null",
            "[1]",
            "{\"k\":\"v\"}",
            "",
            " "
        ])
        .prop_map(str::to_owned),
        template(),
    ];
    prop::collection::btree_map(name, value, 0..4).boxed()
}

/// Values without JSON-ambiguous or YAML-significant spellings, for documents written as JSON.
fn plain_json() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-zA-Z0-9 _./:#@'\"\\\\-]{0,12}".prop_map(Value::String),
        "[\u{0}-\u{1f}é😀\u{fffd}]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_ ]{1,6}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
    .boxed()
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Every node path of a parsed document, spelled like `Positions` spells them.
fn node_paths(value: &Value, path: &str, out: &mut Vec<String>) {
    out.push(path.to_owned());
    match value {
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                node_paths(item, &format!("{path}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                node_paths(item, &child, out);
            }
        }
        _ => {}
    }
}

/// Asserts the shape of a parse result: positions inside the text, errors with a position.
fn check_parse(text: &str) -> Result<Option<Value>, TestCaseError> {
    let lines = text.split(['\n', '\r']).count();
    match yaml::parse(text) {
        Ok((value, positions)) => {
            let mut paths = Vec::new();
            node_paths(&value, "", &mut paths);
            for path in paths {
                if let Some((line, column)) = positions.find(&path) {
                    prop_assert!(
                        (1..=lines + 1).contains(&line) && column >= 1,
                        "{path} at {line}:{column} in a text of {lines} lines"
                    );
                }
            }
            Ok(Some(value))
        }
        Err(e) => {
            prop_assert!(
                e.line >= 1 && e.column >= 1,
                "error at {}:{}",
                e.line,
                e.column
            );
            prop_assert!(!e.message.is_empty());
            Ok(None)
        }
    }
}

/// Asserts that `after` is `before` with only `${`-bearing strings replaced (by a string or,
/// for a whole-string reference, any JSON value); collects the paths of all strings.
fn same_shape(
    before: &Value,
    after: &Value,
    path: &str,
    strings: &mut BTreeSet<String>,
) -> Result<(), TestCaseError> {
    match (before, after) {
        (Value::String(template), _) => {
            strings.insert(path.to_owned());
            if !template.contains("${") {
                prop_assert_eq!(after, before, "at {}", path);
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            prop_assert_eq!(old.len(), new.len(), "at {}", path);
            for (i, (old, new)) in old.iter().zip(new).enumerate() {
                same_shape(old, new, &format!("{path}[{i}]"), strings)?;
            }
        }
        (Value::Object(old), Value::Object(new)) => {
            prop_assert!(old.keys().eq(new.keys()), "keys changed at {}", path);
            for (key, old) in old {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                same_shape(old, &new[key], &child, strings)?;
            }
        }
        _ => prop_assert_eq!(after, before, "at {}", path),
    }
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

// ---------------------------------------------------------------------------
// YAML and load
// ---------------------------------------------------------------------------

proptest! {
    #[test]
    fn yaml_parse_never_panics_and_positions_point_into_the_text(text in config_text()) {
        check_parse(&text)?;
    }

    #[test]
    fn yaml_parse_never_panics_on_arbitrary_text(text in ".{0,64}") {
        check_parse(&text)?;
    }

    #[test]
    fn yaml_parse_reads_json_documents_as_the_same_value(value in plain_json(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&value).expect("serializes")
        } else {
            serde_json::to_string(&value).expect("serializes")
        };
        let parsed = check_parse(&text)?;
        prop_assert_eq!(parsed.as_ref(), Some(&value), "{}", text);
    }

    #[test]
    fn load_agrees_with_parse_and_validate_never_panics(
        text in config_text(),
        strict_env in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write(dir.path(), "worker.yaml", &text);
        let options = LoadOptions { env_file: None, strict_env };
        let loaded = config::load(&path, &options);
        match (yaml::parse(&text), loaded) {
            (Err(parse), Err(LoadError::Yaml { line, column, message, .. })) => {
                prop_assert_eq!((parse.line, parse.column, parse.message), (line, column, message));
            }
            (Err(parse), other) => {
                prop_assert!(false, "parse failed with {parse} but load gave {other:?}");
            }
            (Ok(_), Err(LoadError::Env(message))) => prop_assert!(!message.is_empty()),
            (Ok(_), Err(other)) => prop_assert!(false, "parse succeeded but load failed: {other}"),
            (Ok((mut expected, _)), Ok(doc)) => {
                let missing = interpolate(&mut expected, &Environment::from_process());
                if doc.value.pointer("/app/env_file").is_none() && !dir.path().join(".env").exists() {
                    prop_assert_eq!(&doc.value, &expected);
                }
                let strict = strict_env
                    || doc.value.pointer("/app/strict_env") == Some(&Value::Bool(true));
                prop_assert!(!strict || missing.is_empty(), "strict load passed with missing {missing:?}");
                for strict_check in [false, true] {
                    let checked = config::spec::validate(&doc, &Registry::with_builtins(), strict_check);
                    if let Err(problems) = checked {
                        prop_assert!(!problems.items.is_empty(), "validate failed without a problem");
                        for problem in &problems.items {
                            prop_assert!(!problem.message.is_empty());
                            prop_assert!(problem.line.is_none_or(|l| l >= 1));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_mutation_seeds_load_and_validate_cleanly() {
    for seed in EXAMPLES.iter().chain([&FLOW]) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write(dir.path(), "worker.yaml", seed);
        let doc = config::load(&path, &LoadOptions::default()).expect("loads");
        if let Err(problems) = config::spec::validate(&doc, &Registry::with_builtins(), true) {
            panic!("{seed}\n{problems:#?}");
        }
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // Block nesting used to overflow the stack inside saphyr's recursive loader.
    for depth in [yaml::MAX_DEPTH, yaml::MAX_DEPTH + 1, 300, 3_000] {
        let flow = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let sequences: String = (0..depth)
            .map(|i| format!("{}- \n", " ".repeat(i)))
            .collect();
        let mappings: String = (0..depth)
            .map(|i| format!("{}k:\n", " ".repeat(i)))
            .collect();
        let compact = format!("{}x\n", "- ".repeat(depth));
        for text in [flow, sequences, mappings, compact] {
            let parsed = yaml::parse(&text);
            assert_eq!(
                parsed.is_ok(),
                depth <= yaml::MAX_DEPTH,
                "depth {depth}: {:?}",
                parsed.err()
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Interpolation and .env files
// ---------------------------------------------------------------------------

proptest! {
    #[test]
    fn interpolate_keeps_the_shape_and_reports_only_unset_variables(
        value in templated_value(),
        vars in variables(),
    ) {
        let env = Environment::from_pairs(vars.clone());
        let mut out = value.clone();
        let missing = interpolate(&mut out, &env);
        let mut strings = BTreeSet::new();
        same_shape(&value, &out, "", &mut strings)?;
        for m in &missing {
            prop_assert!(strings.contains(&m.path), "missing {:?} at an unknown path", m);
            prop_assert_eq!(m.name.trim(), m.name.as_str());
            prop_assert!(!vars.contains_key(&m.name), "{} is set but reported missing", m.name);
        }
    }

    #[test]
    fn interpolate_substitutes_set_variables_and_defaults(
        prefix in "[^$]{0,4}",
        suffix in "[^$]{0,4}",
        value in "[^$]{0,6}",
        default in "[^}$]{0,6}",
        set in any::<bool>(),
    ) {
        let env = Environment::from_pairs(set.then(|| ("V".to_owned(), value.clone())));
        let expected = if set { value } else { default.clone() };
        let mut doc = json!([format!("{prefix}${{V:-{default}}}{suffix}")]);
        prop_assert!(interpolate(&mut doc, &env).is_empty());
        if prefix.is_empty() && suffix.is_empty() {
            let typed = match serde_json::from_str::<Value>(&expected) {
                Ok(Value::Null) | Err(_) => Value::String(expected),
                Ok(parsed) => parsed,
            };
            prop_assert_eq!(&doc[0], &typed);
        } else {
            prop_assert_eq!(&doc[0], &Value::String(format!("{prefix}{expected}{suffix}")));
        }
        let mut unset = json!({"k": format!("{prefix}${{V}}{suffix}")});
        let missing = interpolate(&mut unset, &env);
        prop_assert_eq!(missing.len(), usize::from(!set));
    }

    #[test]
    fn unterminated_references_are_left_alone(prefix in "[^$]{0,6}", rest in "[^}]{0,8}") {
        let text = format!("{prefix}${{{rest}");
        let mut doc = json!({"a": text.clone()});
        prop_assert!(interpolate(&mut doc, &Environment::default()).is_empty());
        prop_assert_eq!(&doc["a"], &Value::String(text));
    }

    #[test]
    fn load_dotenv_never_panics_and_fails_only_on_lines_without_equals(text in dotenv_text()) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = write(dir.path(), ".env", &text);
        let mut env = Environment::default();
        let broken = text.lines().position(|raw| {
            let line = raw.trim();
            !line.is_empty() && !line.starts_with('#') && !line.contains('=')
        });
        match (env.load_dotenv(&path), broken) {
            (Ok(()), None) => {}
            (Err(message), Some(index)) => {
                let expected = format!(":{}: expected KEY=VALUE", index + 1);
                prop_assert!(message.ends_with(&expected), "{}", message);
            }
            (result, broken) => {
                prop_assert!(false, "load_dotenv gave {result:?}, first bad line {broken:?}");
            }
        }
    }

    #[test]
    fn load_dotenv_values_reach_interpolation_and_the_first_definition_wins(
        entries in prop::collection::vec(dotenv_entry(), 1..8),
        preset in prop::option::of("[a-z]{0,4}"),
        crlf in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let newline = if crlf { "\r\n" } else { "\n" };
        let text: String = entries
            .iter()
            .flat_map(|(line, _, _)| [line.as_str(), newline, "# comment", newline, newline])
            .collect();
        let path = write(dir.path(), ".env", &text);
        let mut env = Environment::from_pairs(preset.clone().map(|v| ("K0".to_owned(), v)));
        env.load_dotenv(&path).expect("well-formed lines");
        let mut expected: BTreeMap<&str, &str> = BTreeMap::new();
        if let Some(preset) = &preset {
            expected.insert("K0", preset);
        }
        for (_, key, value) in &entries {
            expected.entry(key.as_str()).or_insert(value.as_str());
        }
        for (key, value) in expected {
            let mut doc = json!(format!("<${{{key}}}>"));
            prop_assert!(interpolate(&mut doc, &env).is_empty());
            prop_assert_eq!(doc, Value::String(format!("<{value}>")));
        }
    }

    #[test]
    fn load_reads_the_dotenv_next_to_the_yaml(
        entry in dotenv_entry(),
        junk in dotenv_text(),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let (line, key, value) = entry;
        let dotenv = format!("{line}\n{junk}");
        write(dir.path(), ".env", &dotenv);
        let path = write(dir.path(), "worker.yaml", &format!("v: \"<${{{key}}}>\"\n"));
        let mut env = Environment::default();
        let direct = env.load_dotenv(&dir.path().join(".env"));
        match config::load(&path, &LoadOptions::default()) {
            Ok(doc) => {
                prop_assert!(direct.is_ok());
                // A variable of the same name in the process environment wins.
                let expected = std::env::var(&key).unwrap_or(value);
                prop_assert_eq!(&doc.value["v"], &Value::String(format!("<{expected}>")));
            }
            Err(LoadError::Env(message)) => prop_assert_eq!(Err(message), direct),
            Err(other) => prop_assert!(false, "{other}"),
        }
    }
}

/// A well-formed `.env` line with the key and value it defines.
fn dotenv_entry() -> BoxedStrategy<(String, String, String)> {
    let key = prop::sample::select(vec!["K0", "K1", "K2", "FUZZ_K3"]).prop_map(str::to_owned);
    let plain = "[A-Za-z0-9_./:@-]{0,10}";
    let spaced = "[A-Za-z0-9_ #=$-]{0,10}";
    prop_oneof![
        (key.clone(), plain).prop_map(|(k, v)| (format!("{k}={v}"), k, v)),
        (key.clone(), plain).prop_map(|(k, v)| (format!("  export {k} =  {v}  "), k, v)),
        (key.clone(), "[A-Za-z0-9_./:@-]{1,10}").prop_map(|(k, v)| (
            format!("{k}={v} # note"),
            k,
            v
        )),
        (key.clone(), spaced).prop_map(|(k, v)| (format!("{k}=\"{v}\""), k, v)),
        (key, spaced).prop_map(|(k, v)| (format!("{k}='{v}'"), k, v)),
    ]
    .boxed()
}

/// `.env` text: lines of `KEY=VALUE` variants, comments, blanks, quotes and junk.
fn dotenv_text() -> BoxedStrategy<String> {
    let line = prop_oneof![
        3 => dotenv_entry().prop_map(|(line, _, _)| line),
        1 => prop::sample::select(vec![
            "", "#", "# x=y", "   ", "export", "export ", "=", "=value", "KEY=", "KEY='", "KEY=\"",
            "KEY=\"a'", "KEY='é'", "KEY=😀", "KEY= # c", "\u{feff}KEY=1", "KEY\u{0}=1", "\t#",
        ])
        .prop_map(str::to_owned),
        1 => ".{0,12}",
    ];
    (prop::collection::vec(line, 0..8), any::<bool>())
        .prop_map(|(lines, crlf)| lines.join(if crlf { "\r\n" } else { "\n" }))
        .boxed()
}
