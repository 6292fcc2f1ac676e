//! YAML to JSON values, remembering where each node was (line and column) for error messages.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYamlOwned, ScalarOwned, YamlDataOwned};
use saphyr_parser::{Event, Parser};
use serde_json::{Map, Number, Value};

/// Where each node of a document is: YAML path (`tasks[0].retry`) → 1-based (line, column).
#[derive(Debug, Default, Clone)]
pub struct Positions {
    at: HashMap<String, (usize, usize)>,
}

impl Positions {
    /// The position of `path`, or of its closest ancestor that has one.
    pub fn find(&self, path: &str) -> Option<(usize, usize)> {
        let mut p = path.to_string();
        loop {
            if let Some(pos) = self.at.get(&p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }
}

/// A YAML document that failed to parse.
#[derive(Debug, thiserror::Error)]
#[error("invalid YAML at line {line}, column {column}: {message}")]
pub struct YamlError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What the parser said.
    pub message: String,
}

/// The deepest nesting of collections accepted. saphyr limits flow collections (`[[[...]]]`)
/// but not block ones, and its loader recurses once per level, so a deeply indented file would
/// overflow the stack instead of failing.
pub const MAX_DEPTH: usize = 128;

/// Parses one YAML document into a JSON value and the positions of its nodes.
pub fn parse(text: &str) -> Result<(Value, Positions), YamlError> {
    check_depth(text)?;
    let docs = MarkedYamlOwned::load_from_str(text).map_err(|e| YamlError {
        line: e.marker().line(),
        column: e.marker().col() + 1,
        message: e.info().to_string(),
    })?;
    let mut positions = Positions::default();
    let Some(doc) = docs.into_iter().next() else {
        return Ok((Value::Null, positions));
    };
    let value = convert(&doc, "", &mut positions)?;
    Ok((value, positions))
}

/// Rejects documents nested deeper than [`MAX_DEPTH`] using the (iterative) event parser, before
/// the recursive loader sees them. Scan errors are left to the loader, which reports the same one.
fn check_depth(text: &str) -> Result<(), YamlError> {
    let mut depth = 0usize;
    for event in Parser::new_from_iter(text.chars()) {
        let Ok((event, span)) = event else {
            return Ok(());
        };
        match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(YamlError {
                        line: span.start.line(),
                        column: span.start.col() + 1,
                        message: format!("collections nested deeper than {MAX_DEPTH} levels"),
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn convert(
    node: &MarkedYamlOwned,
    path: &str,
    positions: &mut Positions,
) -> Result<Value, YamlError> {
    let start = node.span.start;
    positions
        .at
        .entry(path.to_string())
        .or_insert((start.line(), start.col() + 1));
    let bad = |message: String| YamlError {
        line: start.line(),
        column: start.col() + 1,
        message,
    };
    Ok(match &node.data {
        YamlDataOwned::Value(scalar) => scalar_value(scalar),
        YamlDataOwned::Representation(text, _, _) => Value::String(text.clone()),
        YamlDataOwned::Sequence(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| convert(item, &format!("{path}[{i}]"), positions))
                .collect::<Result<_, _>>()?,
        ),
        YamlDataOwned::Mapping(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                let name = match &key.data {
                    YamlDataOwned::Value(ScalarOwned::String(s)) => s.clone(),
                    YamlDataOwned::Value(other) => scalar_value(other).to_string(),
                    _ => return Err(bad("mapping keys must be plain scalars".into())),
                };
                let child = join(path, &name);
                let key_start = key.span.start;
                positions
                    .at
                    .insert(child.clone(), (key_start.line(), key_start.col() + 1));
                if map.contains_key(&name) {
                    return Err(YamlError {
                        line: key_start.line(),
                        column: key_start.col() + 1,
                        message: format!("duplicate key {name:?}"),
                    });
                }
                let converted = convert(value, &child, positions)?;
                map.insert(name, converted);
            }
            Value::Object(map)
        }
        YamlDataOwned::Tagged(_, inner) => convert(inner, path, positions)?,
        YamlDataOwned::Alias(_) => return Err(bad("YAML aliases are not supported".into())),
        YamlDataOwned::BadValue => return Err(bad("a value could not be parsed".into())),
    })
}

fn scalar_value(scalar: &ScalarOwned) -> Value {
    match scalar {
        ScalarOwned::Null => Value::Null,
        ScalarOwned::Boolean(b) => Value::Bool(*b),
        ScalarOwned::Integer(i) => Value::from(*i),
        ScalarOwned::FloatingPoint(f) => {
            Number::from_f64(f.into_inner()).map_or(Value::Null, Value::Number)
        }
        ScalarOwned::String(s) => Value::String(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_keep_their_line_and_column() {
        let text =
            "app:\n  name: demo\ntasks:\n  - name: a\n    retry:\n      type: max_attempts\n";
        let (value, positions) = parse(text).unwrap();
        assert_eq!(value["tasks"][0]["retry"]["type"], "max_attempts");
        assert_eq!(positions.find("app.name"), Some((2, 3)));
        assert_eq!(positions.find("tasks[0].retry.type"), Some((6, 7)));
        assert_eq!(positions.find("tasks[0].retry.missing"), Some((5, 5)));
    }

    #[test]
    fn syntax_errors_and_duplicate_keys_name_the_line() {
        let err = parse("a: [1, 2\n").unwrap_err();
        assert!(err.line >= 1);
        let err = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.message.contains("duplicate"), "{}", err.message);
    }

    #[test]
    fn deep_block_nesting_is_an_error_not_a_stack_overflow() {
        // Found by tests/fuzz.rs: saphyr's loader recursed once per level and overflowed.
        let text: String = (0..1_000)
            .map(|i| format!("{}- \n", " ".repeat(i)))
            .collect();
        let err = parse(&text).unwrap_err();
        assert_eq!(
            (err.line, err.column, err.message.as_str()),
            (129, 129, "collections nested deeper than 128 levels")
        );
    }

    #[test]
    fn scalars_keep_yaml_types() {
        let (v, _) = parse("i: 3\nf: 0.5\nb: true\nn: ~\ns: '3'\n").unwrap();
        assert_eq!(
            v,
            serde_json::json!({"i": 3, "f": 0.5, "b": true, "n": null, "s": "3"})
        );
    }
}
