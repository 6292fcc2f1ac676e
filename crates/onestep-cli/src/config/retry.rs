//! `retry:` of a task: the spec, its checks, its words for `onestep check`, and the policy.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{child, normalize_type, type_name};
use onestep_core::{
    ByFailureKind, ExponentialBackoff, FailureKind, MaxAttempts, NoRetry, RetryPolicy,
};
use serde_json::{Map, Value};

use super::checker::Checker;

/// A retry policy from YAML.
#[derive(Debug, Clone, PartialEq)]
pub enum RetrySpec {
    /// `no_retry` / `none`.
    None,
    /// `max_attempts`.
    MaxAttempts {
        /// Runs allowed (default 3).
        max_attempts: u32,
        /// Fixed delay.
        delay_s: Option<f64>,
    },
    /// `exponential_backoff`.
    Exponential {
        /// Runs allowed (default 3).
        max_attempts: u32,
        /// First delay (default 1).
        min_delay_s: f64,
        /// Largest delay (default 60).
        max_delay_s: f64,
        /// Growth (default 2).
        multiplier: f64,
        /// `none`, `full` or `equal`.
        jitter: String,
    },
    /// `by_failure_kind`.
    ByFailureKind {
        /// Fallback policy.
        default: Option<Box<RetrySpec>>,
        /// For kind `error`.
        error: Option<Box<RetrySpec>>,
        /// For kind `timeout`.
        timeout: Option<Box<RetrySpec>>,
        /// For kind `cancelled`.
        cancelled: Option<Box<RetrySpec>>,
    },
}

/// Seconds as a person reads them: `5 s`, `0.5 s`.
fn seconds(value: f64) -> String {
    format!("{value} s")
}

/// The policy in the YAML's words, for `onestep check`:
/// `exponential_backoff: 3 attempts, waits 1 s, ×2, at most 30 s, jitter none`.
impl std::fmt::Display for RetrySpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RetrySpec::None => f.write_str("no_retry"),
            RetrySpec::MaxAttempts {
                max_attempts,
                delay_s,
            } => {
                write!(f, "max_attempts: {max_attempts} attempts")?;
                match delay_s {
                    Some(delay) if *delay > 0.0 => write!(f, ", {} apart", seconds(*delay)),
                    _ => f.write_str(", no wait"),
                }
            }
            RetrySpec::Exponential {
                max_attempts,
                min_delay_s,
                max_delay_s,
                multiplier,
                jitter,
            } => write!(
                f,
                "exponential_backoff: {max_attempts} attempts, waits {}, ×{multiplier}, at most \
                 {}, jitter {jitter}",
                seconds(*min_delay_s),
                seconds(*max_delay_s)
            ),
            RetrySpec::ByFailureKind {
                default,
                error,
                timeout,
                cancelled,
            } => {
                f.write_str("by_failure_kind (")?;
                let mut first = true;
                for (kind, policy) in [
                    ("error", error),
                    ("timeout", timeout),
                    ("cancelled", cancelled),
                    ("default", default),
                ] {
                    if let Some(policy) = policy {
                        if !first {
                            f.write_str("; ")?;
                        }
                        first = false;
                        write!(f, "{kind} → {policy}")?;
                    }
                }
                if first {
                    f.write_str("no policies: no retry")?;
                }
                f.write_str(")")
            }
        }
    }
}

const RETRY_TYPES: &str = "no_retry, none, max_attempts, exponential_backoff, by_failure_kind";

pub(crate) fn retry_spec(v: &Value, path: &str, c: &mut Checker<'_>) -> Option<RetrySpec> {
    let empty = Map::new();
    let (type_raw, map) = match v {
        Value::String(s) => (s.clone(), &empty),
        Value::Object(m) => match m.get("type").and_then(Value::as_str) {
            Some(t) => (t.to_string(), m),
            None => {
                c.problem(
                    &child(path, "type"),
                    format!("is required; one of {RETRY_TYPES}"),
                );
                return None;
            }
        },
        other => {
            c.problem(
                path,
                format!(
                    "expected a retry type or a mapping with `type`, got {}",
                    type_name(other)
                ),
            );
            return None;
        }
    };
    let kind = normalize_type(&type_raw).replace("-", "_");
    let attempts =
        |c: &mut Checker<'_>| c.opt_integer(map, "max_attempts", path, 1).unwrap_or(3) as u32;
    Some(match kind.as_str() {
        "no_retry" | "none" => {
            c.unknown_fields(map, &["type"], path);
            RetrySpec::None
        }
        "max_attempts" => {
            c.unknown_fields(map, &["type", "max_attempts", "delay_s"], path);
            RetrySpec::MaxAttempts {
                max_attempts: attempts(c),
                delay_s: c.opt_number(map, "delay_s", path, true),
            }
        }
        "exponential_backoff" => {
            c.unknown_fields(
                map,
                &[
                    "type",
                    "max_attempts",
                    "min_delay_s",
                    "max_delay_s",
                    "multiplier",
                    "jitter",
                ],
                path,
            );
            let max_attempts = attempts(c);
            let min_delay_s = c.opt_number(map, "min_delay_s", path, true).unwrap_or(1.0);
            let max_delay_s = c.opt_number(map, "max_delay_s", path, true).unwrap_or(60.0);
            let multiplier = c.opt_number(map, "multiplier", path, false).unwrap_or(2.0);
            if max_delay_s < min_delay_s {
                c.problem(
                    &child(path, "max_delay_s"),
                    format!("must be >= min_delay_s ({min_delay_s}), got {max_delay_s}"),
                );
            }
            let jitter = c
                .opt_string(map, "jitter", path)
                .unwrap_or_else(|| "none".into());
            if !["none", "full", "equal"].contains(&jitter.as_str()) {
                c.problem(
                    &child(path, "jitter"),
                    format!("must be one of none, full, equal; got {jitter:?}"),
                );
            }
            RetrySpec::Exponential {
                max_attempts,
                min_delay_s,
                max_delay_s,
                multiplier,
                jitter,
            }
        }
        "by_failure_kind" => {
            c.unknown_fields(
                map,
                &["type", "default", "error", "timeout", "cancelled"],
                path,
            );
            let sub = |key: &str, c: &mut Checker<'_>| {
                map.get(key)
                    .filter(|v| !v.is_null())
                    .and_then(|v| retry_spec(v, &child(path, key), c))
                    .map(Box::new)
            };
            let spec = RetrySpec::ByFailureKind {
                default: sub("default", c),
                error: sub("error", c),
                timeout: sub("timeout", c),
                cancelled: sub("cancelled", c),
            };
            if ["default", "error", "timeout", "cancelled"]
                .iter()
                .all(|k| map.get(*k).is_none_or(Value::is_null))
            {
                c.problem(
                    path,
                    "by_failure_kind needs at least one of default, error, timeout, cancelled",
                );
            }
            spec
        }
        _ => {
            c.problem(
                &child(path, "type"),
                format!("unknown retry type {type_raw:?}; expected one of {RETRY_TYPES}"),
            );
            return None;
        }
    })
}

#[cfg(test)]
mod retry_text_tests {
    use super::RetrySpec;

    #[test]
    fn retry_policies_print_in_the_yamls_words() {
        let exponential = RetrySpec::Exponential {
            max_attempts: 3,
            min_delay_s: 1.0,
            max_delay_s: 30.0,
            multiplier: 2.0,
            jitter: "none".into(),
        };
        assert_eq!(
            exponential.to_string(),
            "exponential_backoff: 3 attempts, waits 1 s, ×2, at most 30 s, jitter none"
        );
        let fixed = RetrySpec::MaxAttempts {
            max_attempts: 2,
            delay_s: Some(0.5),
        };
        assert_eq!(fixed.to_string(), "max_attempts: 2 attempts, 0.5 s apart");
        let by_kind = RetrySpec::ByFailureKind {
            default: Some(Box::new(RetrySpec::None)),
            error: Some(Box::new(fixed)),
            timeout: None,
            cancelled: None,
        };
        assert_eq!(
            by_kind.to_string(),
            "by_failure_kind (error → max_attempts: 2 attempts, 0.5 s apart; default → no_retry)"
        );
    }
}

/// The retry policy a spec describes.
pub fn retry_policy(spec: &RetrySpec) -> Result<Arc<dyn RetryPolicy>, String> {
    Ok(match spec {
        RetrySpec::None => Arc::new(NoRetry),
        RetrySpec::MaxAttempts {
            max_attempts,
            delay_s,
        } => {
            let p = MaxAttempts::new(*max_attempts).map_err(|e| e.to_string())?;
            Arc::new(match delay_s {
                Some(d) => p.with_delay(Duration::from_secs_f64(*d)),
                None => p,
            })
        }
        RetrySpec::Exponential {
            max_attempts,
            min_delay_s,
            max_delay_s,
            multiplier,
            jitter,
        } => Arc::new(
            ExponentialBackoff::from_secs(
                *max_attempts,
                *min_delay_s,
                *max_delay_s,
                *multiplier,
                jitter
                    .parse()
                    .map_err(|e: onestep_core::Error| e.to_string())?,
            )
            .map_err(|e| e.to_string())?,
        ),
        RetrySpec::ByFailureKind {
            default,
            error,
            timeout,
            cancelled,
        } => {
            let mut b = ByFailureKind::builder();
            let boxed = |s: &RetrySpec| retry_policy(s).map(ArcPolicy);
            if let Some(d) = default {
                b = b.default_policy(boxed(d)?);
            }
            for (kind, sub) in [
                (FailureKind::Error, error),
                (FailureKind::Timeout, timeout),
                (FailureKind::Cancelled, cancelled),
            ] {
                if let Some(s) = sub {
                    b = b.on(kind, boxed(s)?);
                }
            }
            Arc::new(b.build().map_err(|e| e.to_string())?)
        }
    })
}

/// A shared policy usable where an owned one is expected.
#[derive(Debug)]
struct ArcPolicy(Arc<dyn RetryPolicy>);

impl RetryPolicy for ArcPolicy {
    fn on_error(
        &self,
        envelope: &onestep_core::Envelope,
        failure: &onestep_core::FailureInfo,
    ) -> onestep_core::RetryAction {
        self.0.on_error(envelope, failure)
    }

    fn describe(&self) -> String {
        self.0.describe()
    }
}
