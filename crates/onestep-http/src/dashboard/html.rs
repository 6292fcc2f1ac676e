//! The page frame, the small pieces every page uses, the throughput chart (SVG drawn here), and
//! the two compiled-in assets.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use onestep_core::execution::ExecutionStatus;
use onestep_core::execution::digest::python_isoformat;
use onestep_core::execution::inspect::FinishedBucket;
use time::OffsetDateTime;

use super::Ui;

const STYLESHEET: &str = include_str!("assets/app.css");
const SCRIPT: &str = include_str!("assets/app.js");

/// `GET {prefix}/assets/app.css`.
pub(crate) async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLESHEET)
}

/// `GET {prefix}/assets/app.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

fn asset(kind: &'static str, text: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        text,
    )
        .into_response()
}

/// Which tab a page belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tab {
    Overview,
    Executions,
    Workers,
}

/// Whether the request asks only for the page body (the refresh script's requests).
pub(crate) fn wants_fragment(headers: &HeaderMap) -> bool {
    headers
        .get("x-onestep-fragment")
        .is_some_and(|v| v.as_bytes() == b"1")
}

/// A whole page around `body`, or only `body` for the refresh script.
pub(crate) fn page<B>(
    ui: &Ui<B>,
    headers: &HeaderMap,
    tab: Tab,
    title: &str,
    body: Markup,
) -> Response {
    if wants_fragment(headers) {
        return Html(body.into_string()).into_response();
    }
    let p = &ui.prefix;
    let tabs = [
        (Tab::Overview, "Overview", format!("{p}/")),
        (Tab::Executions, "Executions", format!("{p}/executions")),
        (Tab::Workers, "Workers", format!("{p}/workers")),
    ];
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · onestep" }
                // No icon: a page asks for none (an absent /favicon.ico would be an error).
                link rel="icon" href="data:,";
                link rel="stylesheet" href={ (p) "/assets/app.css" };
                script src={ (p) "/assets/app.js" } defer {}
            }
            body data-refresh-ms=(ui.refresh.as_millis()) {
                header.top {
                    span.brand { "onestep" }
                    span.namespace title="namespace" { (ui.namespace) }
                    nav {
                        @for (t, label, href) in &tabs {
                            a href=(href) class=[(*t == tab).then_some("active")] { (label) }
                        }
                    }
                    @if ui.read_only { span.badge { "read-only" } }
                    button #refresh-toggle type="button" { "Pause refresh" }
                }
                main #content { (body) }
            }
        }
    };
    Html(markup.into_string()).into_response()
}

/// An error page (or body) with `status`.
pub(crate) fn error<B>(
    ui: &Ui<B>,
    headers: &HeaderMap,
    status: StatusCode,
    message: &str,
) -> Response {
    let body = html! {
        h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
        p.error #error-message { (message) }
    };
    let mut response = page(ui, headers, Tab::Overview, "Error", body);
    *response.status_mut() = status;
    response
}

/// The sign-in page of a bearer-token dashboard.
pub(crate) fn login(prefix: &str, problem: Option<&str>) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    title { "Sign in · onestep" }
                    link rel="icon" href="data:,";
                }
                body {
                    h1 { "onestep dashboard" }
                    @if let Some(problem) = problem { p #login-error { (problem) } }
                    form method="post" action={ (prefix) "/login" } {
                        label for="token" { "Token " }
                        input #token type="password" name="token" autocomplete="current-password" required;
                        " "
                        button type="submit" { "Sign in" }
                    }
                }
            }
        }
        .into_string(),
    )
}

/// An instant as the API prints it, with how long ago (or how far ahead) it is.
pub(crate) fn when(at: Option<OffsetDateTime>, now: OffsetDateTime) -> Markup {
    match at {
        None => html! { span.muted { "—" } },
        Some(at) => html! {
            time datetime=(python_isoformat(at)) title=(python_isoformat(at)) { (relative(at, now)) }
        },
    }
}

/// "12 s ago", "in 3 min".
pub(crate) fn relative(at: OffsetDateTime, now: OffsetDateTime) -> String {
    let seconds = (now - at).whole_seconds();
    let span = |s: i64| match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    };
    if seconds >= 0 {
        format!("{} ago", span(seconds))
    } else {
        format!("in {}", span(-seconds))
    }
}

/// A status as a coloured label.
pub(crate) fn status(status: ExecutionStatus) -> Markup {
    html! { span class={ "status status-" (status.as_str()) } { (status.as_str()) } }
}

/// A JSON value, pretty-printed.
pub(crate) fn json_block(value: &serde_json::Value) -> Markup {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    html! { pre.json { (text) } }
}

/// The bars of the last hour: succeeded above the axis, failed (and expired) below, one per
/// bucket, scaled to the busiest bucket.
pub(crate) fn throughput_chart(buckets: &[FinishedBucket]) -> Markup {
    let (width, half) = (600.0_f64, 60.0_f64);
    let peak = buckets
        .iter()
        .map(|b| (b.succeeded + b.cancelled).max(b.failed + b.expired))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let step = width / buckets.len().max(1) as f64;
    let mut bars = String::new();
    for (i, b) in buckets.iter().enumerate() {
        let x = i as f64 * step;
        let up = (b.succeeded + b.cancelled) as f64 / peak * half;
        let down = (b.failed + b.expired) as f64 / peak * half;
        let minute = b.start.time();
        let label = format!(
            "{:02}:{:02} UTC: {} succeeded, {} failed, {} cancelled, {} expired",
            minute.hour(),
            minute.minute(),
            b.succeeded,
            b.failed,
            b.cancelled,
            b.expired
        );
        bars.push_str(&format!(
            "<g><title>{}</title><rect class=\"ok\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{up:.1}\"/>\
             <rect class=\"bad\" x=\"{x:.1}\" y=\"{half:.1}\" width=\"{:.1}\" height=\"{down:.1}\"/></g>",
            maud::html! { (label) }.into_string(),
            half - up,
            (step - 1.0).max(1.0),
            (step - 1.0).max(1.0),
        ));
    }
    html! {
        svg.chart #throughput-chart viewBox={ "0 0 " (width) " " (half * 2.0) } role="img" preserveAspectRatio="none"
            aria-label="Executions finished per minute over the last hour" {
            line.axis x1="0" y1=(half) x2=(width) y2=(half) {}
            (PreEscaped(bars))
        }
        div.chart-axis { span { "60 min ago" } span { "now" } }
    }
}
