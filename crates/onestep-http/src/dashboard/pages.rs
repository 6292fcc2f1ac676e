//! The pages and the two actions.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use onestep_core::execution::inspect::{ExecutionInspector, ExecutionSearch, TaskStatusCount};
use onestep_core::execution::{
    Execution, ExecutionError, ExecutionQuery, ExecutionStatus, SubmitOptions,
};
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use super::Ui;
use super::html::{self, Tab, error, json_block, page, relative, status, when};
use crate::plain_json;

type Shared<B> = State<Arc<Ui<B>>>;

/// An answer for a store error: 503 when the store is unreachable, 400 for what the user typed.
fn store_error<B>(ui: &Ui<B>, headers: &HeaderMap, err: &ExecutionError) -> Response {
    let code = match err {
        ExecutionError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
        ExecutionError::Connector(_) | ExecutionError::Backend(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        _ => StatusCode::UNPROCESSABLE_ENTITY,
    };
    error(ui, headers, code, &err.to_string())
}

/// `GET {prefix}/`: counts, the oldest waiting execution, the backlog per task, the last hour.
pub(crate) async fn overview<B: ExecutionInspector + Clone + 'static>(
    State(ui): Shared<B>,
    headers: HeaderMap,
) -> Response {
    let now = OffsetDateTime::now_utc();
    let (counts, buckets) = match tokio::try_join!(
        ui.backend.task_counts(&ui.namespace),
        ui.backend
            .finished_per_bucket(&ui.namespace, now, 60, Duration::from_secs(60)),
    ) {
        Ok(read) => read,
        Err(err) => return store_error(&ui, &headers, &err),
    };
    let mut tasks: BTreeMap<&str, BTreeMap<&str, &TaskStatusCount>> = BTreeMap::new();
    for c in &counts {
        tasks
            .entry(&c.task_name)
            .or_default()
            .insert(c.status.as_str(), c);
    }
    // The waiting executions' counts: the oldest of them, and the tasks of the backlog table.
    let waiting: Vec<&TaskStatusCount> = counts
        .iter()
        .filter(|c| {
            matches!(
                c.status,
                ExecutionStatus::Queued | ExecutionStatus::Retrying
            )
        })
        .collect();
    let oldest_waiting = waiting
        .iter()
        .filter_map(|c| c.oldest_created_at.map(|at| (at, *c)))
        .min_by_key(|(at, _)| *at);
    let oldest = match oldest_waiting {
        Some((at, c)) => {
            let mut search = ExecutionSearch::new(ExecutionQuery {
                task_name: Some(c.task_name.clone()),
                status: Some(c.status),
                limit: 1,
                ..ExecutionQuery::new(&ui.namespace)
            });
            search.created_before = Some(at + Duration::from_micros(1));
            ui.backend
                .search(&search)
                .await
                .ok()
                .and_then(|p| p.items.into_iter().next())
        }
        None => None,
    };
    // The waiting executions per task, from the claim index (cheap on a long history); a
    // backend that cannot tell cheaply shows no table, and a failed read shows the rest.
    let mut waiting_tasks: Vec<String> = waiting.iter().map(|c| c.task_name.clone()).collect();
    waiting_tasks.sort();
    waiting_tasks.dedup();
    let backlog = match ui.backend.backlog(&ui.namespace, &waiting_tasks).await {
        Ok(Some(mut rows)) => {
            rows.sort_by(|a, b| a.task_name.cmp(&b.task_name));
            Some(rows)
        }
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = %err, "the dashboard could not read the backlog");
            None
        }
    };
    let finished: u64 = buckets
        .iter()
        .map(|b| b.succeeded + b.failed + b.cancelled + b.expired)
        .sum();
    let failed: u64 = buckets.iter().map(|b| b.failed + b.expired).sum();
    let p = &ui.prefix;
    let body = html! {
        h1 { "Overview" }
        section.cards {
            div.card { div.value #finished-last-hour { (finished) } div.label { "finished in the last hour" } }
            div.card { div.value #failure-rate {
                @if finished == 0 { "—" } @else { (format!("{:.1} %", failed as f64 * 100.0 / finished as f64)) }
            } div.label { "failed or expired" } }
            div.card { div.value #oldest-waiting {
                @match &oldest {
                    Some(e) => a href={ (p) "/executions/" (e.id) } { (relative(e.created_at, now).replace(" ago", "")) },
                    None => "—",
                }
            } div.label { "oldest waiting execution" } }
        }
        @if let Some(backlog) = backlog.as_ref().filter(|rows| !rows.is_empty()) {
            h2 { "Backlog" }
            table #backlog {
                thead { tr { th { "task" } th { "waiting" } th { "ready now" } th { "oldest ready has waited" } } }
                tbody {
                    @for row in backlog {
                        tr {
                            td { a href={ (p) "/executions?task=" (urlencode(&row.task_name)) } { (row.task_name) } }
                            td.num { (row.depth) }
                            td.num { (row.ready) }
                            td.num {
                                @match row.oldest_ready_at {
                                    Some(at) => (relative(at, now).replace(" ago", "")),
                                    None => span.muted { "—" },
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Last hour" }
        p.muted { "Per minute: succeeded and cancelled above the line, failed and expired below." }
        (html::throughput_chart(&buckets))
        h2 { "Executions by task and status" }
        @if tasks.is_empty() {
            p.muted #no-executions { "No executions in this namespace yet." }
        } @else {
            table #counts {
                thead { tr { th { "task" } @for s in ExecutionStatus::ALL { th { (s.as_str()) } } } }
                tbody {
                    @for (task, by_status) in &tasks {
                        tr {
                            td { a href={ (p) "/executions?task=" (urlencode(task)) } { (task) } }
                            @for s in ExecutionStatus::ALL {
                                td.num {
                                    @match by_status.get(s.as_str()) {
                                        Some(c) => a href={ (p) "/executions?task=" (urlencode(task)) "&status=" (s.as_str()) } { (c.count) },
                                        None => span.muted { "0" },
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    page(&ui, &headers, Tab::Overview, "Overview", body)
}

fn urlencode(text: &str) -> String {
    serde_urlencoded::to_string([("", text)])
        .map(|s| s.trim_start_matches('=').to_owned())
        .unwrap_or_default()
}

/// The executions page's filters, as typed.
#[derive(Default)]
struct Filters {
    task: String,
    status: String,
    after: String,
    before: String,
    meta_key: String,
    meta_value: String,
    limit: String,
}

impl Filters {
    /// The query string of these filters (for the next page and the refresh).
    fn query(&self) -> String {
        let pairs: Vec<(&str, &str)> = [
            ("task", &self.task),
            ("status", &self.status),
            ("after", &self.after),
            ("before", &self.before),
            ("meta_key", &self.meta_key),
            ("meta_value", &self.meta_value),
            ("limit", &self.limit),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k, v.as_str()))
        .collect();
        serde_urlencoded::to_string(pairs).unwrap_or_default()
    }
}

/// A time filter: RFC 3339, or the browser's `datetime-local` form (`2026-12-03T10:30`, read as
/// UTC).
fn instant(field: &str, text: &str) -> Result<Option<OffsetDateTime>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(Some(at));
    }
    let local = format!(
        "{}Z",
        if text.len() == 16 {
            format!("{text}:00")
        } else {
            text.to_owned()
        }
    );
    OffsetDateTime::parse(&local, &Rfc3339)
        .map(Some)
        .map_err(|_| {
            format!("{field} must be a time like 2026-12-03T10:30 (UTC) or RFC 3339, got {text:?}")
        })
}

fn parse_filters(query: Option<&str>) -> Result<(Filters, Option<String>), String> {
    let pairs = crate::body::query_pairs(query).map_err(|e| e.detail)?;
    let mut f = Filters::default();
    let mut cursor = None;
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "task" => &mut f.task,
            "status" => &mut f.status,
            "after" => &mut f.after,
            "before" => &mut f.before,
            "meta_key" => &mut f.meta_key,
            "meta_value" => &mut f.meta_value,
            "limit" => &mut f.limit,
            "cursor" => {
                cursor = Some(v).filter(|c| !c.is_empty());
                continue;
            }
            other => {
                return Err(format!(
                    "unknown filter {other:?}; expected task, status, after, before, meta_key, meta_value, limit, cursor"
                ));
            }
        };
        *slot = v.trim().to_owned();
    }
    Ok((f, cursor))
}

fn search_of(
    namespace: &str,
    f: &Filters,
    cursor: Option<String>,
) -> Result<ExecutionSearch, String> {
    let status = match f.status.as_str() {
        "" => None,
        s => Some(s.parse::<ExecutionStatus>().map_err(|_| {
            format!(
                "status must be one of {}; got {s:?}",
                ExecutionStatus::ALL.map(|s| s.as_str()).join(", ")
            )
        })?),
    };
    let limit = match f.limit.as_str() {
        "" => 50,
        l => l
            .parse()
            .map_err(|_| format!("limit must be an integer between 1 and 200, got {l:?}"))?,
    };
    let mut search = ExecutionSearch::new(ExecutionQuery {
        task_name: Some(f.task.clone()).filter(|t| !t.is_empty()),
        status,
        limit,
        cursor,
        ..ExecutionQuery::new(namespace)
    });
    search.created_after = instant("after", &f.after)?;
    search.created_before = instant("before", &f.before)?;
    search.metadata = match (f.meta_key.as_str(), f.meta_value.as_str()) {
        ("", "") => None,
        ("", _) => return Err("meta_value needs a meta_key".into()),
        (k, v) => Some((k.to_owned(), v.to_owned())),
    };
    search.validate().map_err(|e| e.to_string())?;
    Ok(search)
}

/// `GET {prefix}/executions`: the filtered list.
pub(crate) async fn executions<B: ExecutionInspector + Clone + 'static>(
    State(ui): Shared<B>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let now = OffsetDateTime::now_utc();
    let (filters, cursor) = match parse_filters(query.as_deref()) {
        Ok(parsed) => parsed,
        Err(problem) => return error(&ui, &headers, StatusCode::BAD_REQUEST, &problem),
    };
    let outcome = match search_of(&ui.namespace, &filters, cursor) {
        Ok(search) => ui.backend.search(&search).await.map_err(|e| e.to_string()),
        Err(problem) => Err(problem),
    };
    let p = &ui.prefix;
    let (page_of, problem) = match outcome {
        Ok(page) => (Some(page), None),
        Err(problem) => (None, Some(problem)),
    };
    let body = html! {
        h1 { "Executions" }
        form.filters #filters method="get" action={ (p) "/executions" } {
            label { "task " input name="task" value=(filters.task) placeholder="any"; }
            label { "status "
                select name="status" {
                    option value="" { "any" }
                    @for s in ExecutionStatus::ALL {
                        option value=(s.as_str()) selected[filters.status == s.as_str()] { (s.as_str()) }
                    }
                }
            }
            label { "submitted (UTC) after " input name="after" type="datetime-local" step="1" value=(filters.after) title="UTC"; }
            label { "before " input name="before" type="datetime-local" step="1" value=(filters.before) title="UTC"; }
            label { "metadata " input name="meta_key" value=(filters.meta_key) placeholder="key"; }
            label { "= " input name="meta_value" value=(filters.meta_value) placeholder="value"; }
            button type="submit" { "Filter" }
            " " a href={ (p) "/executions" } { "clear" }
        }
        @if let Some(problem) = &problem { p.error #filter-error { (problem) } }
        @if let Some(listed) = &page_of {
            @if listed.items.is_empty() {
                p.muted #no-match { "No execution matches." }
            } @else {
                table #executions {
                    thead { tr { th { "id" } th { "task" } th { "status" } th { "attempts" } th { "submitted" } th { "finished" } th { "metadata" } } }
                    tbody {
                        @for e in &listed.items {
                            tr data-id=(e.id) {
                                td.mono { a href={ (p) "/executions/" (e.id) } { (e.id) } }
                                td { (e.task_name) }
                                td { (status(e.status)) }
                                td.num { (e.attempts) }
                                td { (when(Some(e.created_at), now)) }
                                td { (when(e.finished_at, now)) }
                                td.mono.clip { (compact(&Value::Object(e.metadata.clone()))) }
                            }
                        }
                    }
                }
                @if let Some(next) = &listed.next_cursor {
                    a.button #next-page href={ (p) "/executions?" (filters.query()) @if !filters.query().is_empty() { "&" } "cursor=" (urlencode(next)) } { "Older →" }
                }
            }
        }
    };
    let mut response = page(&ui, &headers, Tab::Executions, "Executions", body);
    if problem.is_some() {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    response
}

fn compact(value: &Value) -> String {
    let text = plain_json(value).to_string();
    if text.chars().count() > 80 {
        format!("{}…", text.chars().take(80).collect::<String>())
    } else {
        text
    }
}

fn execution_id(raw: &str) -> Option<Uuid> {
    Uuid::parse_str(raw).ok()
}

/// The execution `raw` names in the dashboard's namespace, or the page to answer instead: 404
/// for a malformed id or one not there, the store's error otherwise.
async fn find<B: ExecutionInspector + Clone + 'static>(
    ui: &Ui<B>,
    headers: &HeaderMap,
    raw: &str,
) -> Result<Execution, Response> {
    let not_found = |why: &str| error(ui, headers, StatusCode::NOT_FOUND, why);
    let Some(id) = execution_id(raw) else {
        return Err(not_found("execution ids are UUIDs; this is not one"));
    };
    match ui.client.get(id).await {
        Ok(Some(e)) => Ok(e),
        Ok(None) => Err(not_found("no such execution in this namespace")),
        Err(err) => Err(store_error(ui, headers, &err)),
    }
}

/// `GET {prefix}/executions/{id}`: one execution and its attempts.
pub(crate) async fn detail<B: ExecutionInspector + Clone + 'static>(
    State(ui): Shared<B>,
    headers: HeaderMap,
    Path(raw): Path<String>,
) -> Response {
    let now = OffsetDateTime::now_utc();
    let execution = match find(&ui, &headers, &raw).await {
        Ok(e) => e,
        Err(answer) => return answer,
    };
    let id = execution.id;
    let (attempts, progress) = match tokio::try_join!(
        ui.backend.attempts_of(&ui.namespace, id),
        ui.client.progress(id)
    ) {
        Ok(read) => read,
        Err(err) => return store_error(&ui, &headers, &err),
    };
    let p = &ui.prefix;
    let e = &execution;
    let body = html! {
        h1 { "Execution " span.mono #execution-id { (e.id) } }
        p { (status(e.status)) " " span #task-name { (e.task_name) } }
        @if !ui.read_only {
            div.actions {
                @if !e.is_terminal() && e.status != ExecutionStatus::CancelRequested {
                    form method="post" action={ (p) "/executions/" (e.id) "/cancel" } data-confirm="Cancel this execution?" {
                        input type="hidden" name="csrf" value=(ui.csrf);
                        input name="reason" placeholder="reason (optional)" maxlength="500";
                        button #cancel type="submit" { "Cancel" }
                    }
                }
                form method="post" action={ (p) "/executions/" (e.id) "/resubmit" } data-confirm="Submit the same payload and metadata as a new execution?" {
                    input type="hidden" name="csrf" value=(ui.csrf);
                    button #resubmit type="submit" { "Submit again as new" }
                }
            }
        }
        dl.facts {
            dt { "attempts" } dd #attempt-count { (e.attempts) }
            dt { "submitted" } dd { (when(Some(e.created_at), now)) }
            dt { "available" } dd { (when(Some(e.available_at), now)) }
            dt { "started" } dd { (when(e.started_at, now)) }
            dt { "finished" } dd { (when(e.finished_at, now)) }
            dt { "cancel requested" } dd { (when(e.cancel_requested_at, now)) }
            dt { "expires" } dd { (when(e.expires_at, now)) }
        }
        (section("Payload", "payload", Some(plain_json(&e.payload))))
        (section("Metadata", "metadata", Some(plain_json(&Value::Object(e.metadata.clone())))))
        (section("Progress", "progress", progress.as_ref().map(plain_json)))
        (section("Result", "result", e.result.as_ref().map(plain_json)))
        (section("Error", "error", e.error.as_ref().map(|d| d.to_json())))
        h2 { "Attempts" }
        @if attempts.is_empty() {
            p.muted #no-attempts { "Not started yet." }
        } @else {
            ol.timeline #attempts {
                @for a in &attempts {
                    li class={ "attempt attempt-" (a.status.as_str()) } {
                        strong { "#" (a.attempt_no) " " (a.status.as_str()) }
                        " on " span.mono { (a.worker_id) }
                        div.muted {
                            "started " (when(Some(a.started_at), now))
                            ", last heartbeat " (when(Some(a.heartbeat_at), now))
                            ", finished " (when(a.finished_at, now))
                            @if let Some(finished) = a.finished_at {
                                " (ran " (format!("{:.3}", (finished - a.started_at).as_seconds_f64())) " s)"
                            }
                        }
                        @if let Some(err) = &a.error { (json_block(err)) }
                    }
                }
            }
        }
    };
    page(
        &ui,
        &headers,
        Tab::Executions,
        &format!("Execution {}", e.id),
        body,
    )
}

fn section(title: &str, id: &str, value: Option<Value>) -> Markup {
    html! {
        h2 { (title) }
        div id=(id) {
            @match &value {
                Some(v) => (json_block(v)),
                None => p.muted { "none" },
            }
        }
    }
}

/// Checks an action request: not read-only, from this origin, with the form's token. Returns
/// the form's fields.
async fn action_form<B>(
    ui: &Ui<B>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Vec<(String, String)>, Response> {
    if ui.read_only {
        return Err(error(
            ui,
            headers,
            StatusCode::FORBIDDEN,
            "this dashboard is read-only",
        ));
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let cross_origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|origin| origin.split_once("://").map(|(_, h)| h) != host)
        || headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|site| !matches!(site, "same-origin" | "none"));
    if cross_origin {
        return Err(error(
            ui,
            headers,
            StatusCode::FORBIDDEN,
            "actions are accepted only from the dashboard's own pages",
        ));
    }
    let bytes = axum::body::to_bytes(body, 16 * 1024).await.map_err(|_| {
        error(
            ui,
            headers,
            StatusCode::PAYLOAD_TOO_LARGE,
            "the form is larger than 16 KiB",
        )
    })?;
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).map_err(|_| {
        error(
            ui,
            headers,
            StatusCode::BAD_REQUEST,
            "the form is not URL-encoded",
        )
    })?;
    let token = fields
        .iter()
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.as_bytes());
    if !token.is_some_and(|t| crate::constant_time_eq(t, ui.csrf.as_bytes())) {
        return Err(error(
            ui,
            headers,
            StatusCode::FORBIDDEN,
            "the form is stale or forged; reload the page and try again",
        ));
    }
    Ok(fields)
}

/// `POST {prefix}/executions/{id}/cancel`: requests the cancel, then shows the execution.
pub(crate) async fn cancel<B: ExecutionInspector + Clone + 'static>(
    State(ui): Shared<B>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    body: Body,
) -> Response {
    let fields = match action_form(&ui, &headers, body).await {
        Ok(fields) => fields,
        Err(refused) => return refused,
    };
    let Some(id) = execution_id(&raw) else {
        return error(
            &ui,
            &headers,
            StatusCode::NOT_FOUND,
            "execution ids are UUIDs; this is not one",
        );
    };
    let reason = fields
        .iter()
        .find(|(k, _)| k == "reason")
        .map(|(_, v)| v.trim())
        .filter(|v| !v.is_empty());
    match ui.client.cancel(id, reason).await {
        Ok(Some(_)) => Redirect::to(&format!("{}/executions/{id}", ui.prefix)).into_response(),
        Ok(None) => error(
            &ui,
            &headers,
            StatusCode::NOT_FOUND,
            "no such execution in this namespace",
        ),
        Err(err) => store_error(&ui, &headers, &err),
    }
}

/// `POST {prefix}/executions/{id}/resubmit`: the same task, payload and metadata as a new
/// execution (no idempotency key), then shows the new one.
pub(crate) async fn resubmit<B: ExecutionInspector + Clone + 'static>(
    State(ui): Shared<B>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    body: Body,
) -> Response {
    if let Err(refused) = action_form(&ui, &headers, body).await {
        return refused;
    }
    let original: Execution = match find(&ui, &headers, &raw).await {
        Ok(e) => e,
        Err(answer) => return answer,
    };
    let mut options = SubmitOptions::default();
    options.metadata = original.metadata.clone();
    match ui
        .client
        .submit(&original.task_name, &original.payload, options)
        .await
    {
        Ok(new) => Redirect::to(&format!("{}/executions/{}", ui.prefix, new.id)).into_response(),
        Err(err) => store_error(&ui, &headers, &err),
    }
}

/// `GET {prefix}/workers`: the leases held now, by worker.
pub(crate) async fn workers<B: ExecutionInspector + Clone + 'static>(
    State(ui): Shared<B>,
    headers: HeaderMap,
) -> Response {
    let now = OffsetDateTime::now_utc();
    let leases = match ui.backend.active_leases(&ui.namespace, 1000).await {
        Ok(leases) => leases,
        Err(err) => return store_error(&ui, &headers, &err),
    };
    let mut by_worker: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for lease in &leases {
        by_worker
            .entry(lease.worker_id.as_deref().unwrap_or("(unknown)"))
            .or_default()
            .push(lease);
    }
    let p = &ui.prefix;
    let body = html! {
        h1 { "Workers" }
        @if by_worker.is_empty() {
            p.muted #no-workers { "No worker holds a lease in this namespace now." }
        }
        @for (worker, held) in &by_worker {
            section.worker data-worker=(worker) {
                h2 { span.mono { (worker) } " " span.muted { (held.len()) " running" } }
                p.muted {
                    "last heartbeat "
                    (when(held.iter().filter_map(|l| l.heartbeat_at).max(), now))
                }
                table {
                    thead { tr { th { "execution" } th { "task" } th { "status" } th { "attempt" } th { "started" } th { "heartbeat" } th { "lease ends" } } }
                    tbody {
                        @for l in held {
                            tr {
                                td.mono { a href={ (p) "/executions/" (l.execution_id) } { (l.execution_id) } }
                                td { (l.task_name) }
                                td { (status(l.status)) }
                                td.num { (l.attempt) }
                                td { (when(l.started_at, now)) }
                                td { (when(l.heartbeat_at, now)) }
                                td { (when(l.lease_expires_at, now)) }
                            }
                        }
                    }
                }
            }
        }
    };
    page(&ui, &headers, Tab::Workers, "Workers", body)
}
