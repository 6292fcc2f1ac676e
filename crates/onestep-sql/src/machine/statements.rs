//! The statements of the state machine, rendered once for a backend's tables and dialect.

use super::*;

/// The statements, rendered once for the backend's tables and dialect.
pub(super) struct Statements {
    pub(super) insert: String,
    pub(super) get: String,
    pub(super) get_for_update: String,
    pub(super) get_in_namespace_for_update: String,
    pub(super) get_by_key: String,
    pub(super) expire_candidates: String,
    pub(super) expire: String,
    pub(super) cancel_expiry_candidates: String,
    pub(super) cancel_expiry: String,
    pub(super) reclaim_candidates: String,
    pub(super) reclaim: String,
    pub(super) finish_attempt_by_token: String,
    pub(super) claim_one_task: String,
    /// The dialect's one-statement claim of one task, if it has one.
    pub(super) claim_one_task_in_one_statement: Option<String>,
    /// The same, answering only what a worker runs each execution with.
    pub(super) claim_one_task_to_run_in_one_statement: Option<String>,
    /// The dialect's look-up of a batch of idempotency keys, if it has one.
    pub(super) rows_by_keys: Option<String>,
    /// The dialect's one-statement submit, if it has one.
    pub(super) insert_one: Option<String>,
    /// The dialect's fixed-shape insert of a batch of new executions, if it has one.
    pub(super) insert_many: Option<String>,
    /// The dialect's fixed-shape write of a batch of completions, if it has one.
    pub(super) complete_many: Option<String>,
    /// The dialect's one-statement completion of executions still running, if it has one.
    pub(super) complete_running: Option<String>,
    /// The same, answering only `id, status` of each written row.
    pub(super) complete_running_status: Option<String>,
    /// The dialect's one-statement lock and read of a batch of leases, if it has one.
    pub(super) lock_leases: Option<String>,
    /// MySQL/MariaDB: the batch statements of one shape, used where the server and the
    /// tables allow them (see `json_batch`).
    pub(super) json: Option<super::json_batch::JsonStatements>,
    pub(super) heartbeat: String,
    pub(super) heartbeat_attempt: String,
    pub(super) get_running_attempt: String,
    pub(super) complete: String,
    pub(super) finish_attempt: String,
    pub(super) release: String,
    pub(super) cancel: String,
    pub(super) attempts: String,
}

impl Statements {
    pub(super) fn new<D: Dialect>(tables: &TableNames) -> Self {
        let (e, a) = (D::quote(&tables.executions), D::quote(&tables.attempts));
        let r = |t: &str| D::render(&sql::render(t, &e, &a, D::FOR_UPDATE, D::SKIP_LOCKED));
        Self {
            insert: r(sql::INSERT_EXECUTION),
            get: r(sql::GET),
            get_for_update: r(sql::GET_FOR_UPDATE),
            get_in_namespace_for_update: r(sql::GET_IN_NAMESPACE_FOR_UPDATE),
            get_by_key: r(sql::GET_BY_KEY),
            expire_candidates: r(sql::EXPIRE_CANDIDATES),
            expire: r(sql::EXPIRE),
            cancel_expiry_candidates: r(sql::CANCEL_EXPIRY_CANDIDATES),
            cancel_expiry: r(sql::CANCEL_EXPIRY),
            reclaim_candidates: r(sql::RECLAIM_CANDIDATES),
            reclaim: r(sql::RECLAIM),
            finish_attempt_by_token: r(sql::FINISH_ATTEMPT_BY_TOKEN),
            claim_one_task: r(&sql::CLAIM.replace("{tasks}", "= ?")),
            claim_one_task_in_one_statement: D::BATCH_PATHS
                .map(|b| r(&one_statement_claim(b.claim, "= ?", ClaimAnswer::Execution))),
            claim_one_task_to_run_in_one_statement: D::BATCH_PATHS
                .map(|b| r(&one_statement_claim(b.claim, "= ?", ClaimAnswer::ToRun))),
            rows_by_keys: D::BATCH_PATHS.map(|b| r(b.rows_by_keys)),
            insert_one: D::BATCH_PATHS.map(|b| r(b.insert_one)),
            insert_many: D::BATCH_PATHS.map(|b| r(b.insert_many)),
            complete_many: D::BATCH_PATHS.map(|b| r(b.complete_many)),
            complete_running: D::BATCH_PATHS.map(|b| r(b.complete_running)),
            complete_running_status: D::BATCH_PATHS.map(|b| r(b.complete_running_status)),
            lock_leases: D::BATCH_PATHS.map(|b| r(b.lock_leases)),
            json: D::SCHEMA
                .is_mysql_family()
                .then(|| super::json_batch::JsonStatements::new::<D>(&e, &a)),
            heartbeat: r(sql::HEARTBEAT),
            heartbeat_attempt: r(sql::HEARTBEAT_ATTEMPT),
            get_running_attempt: r(sql::GET_RUNNING_ATTEMPT),
            complete: r(sql::COMPLETE),
            finish_attempt: r(sql::FINISH_ATTEMPT),
            release: r(sql::RELEASE),
            cancel: r(sql::CANCEL),
            attempts: r(sql::ATTEMPTS),
        }
    }
}

/// The column the claim filters tasks on (`Dialect::claim_task_column`: `task_name`, or on
/// MySQL/MariaDB the generated column that is non-NULL only while claimable), with the
/// statements rewritten for it once, when the backend becomes ready, rather than on every claim.
pub(super) struct ClaimColumn {
    pub(super) column: &'static str,
    /// The claim of one task, filtering on the column.
    pub(super) claim_one_task: String,
    /// The expiry sweep, reading the column's index instead of every row where it has one.
    pub(super) expire_candidates: String,
    /// Where claims resume after a key (see `machine::resume`): the quoted executions table and
    /// the index the resumed claim reads, when the dialect resumes claims on this table.
    resume: Option<(String, String)>,
    /// The claim of one task resuming after a key, when claims resume.
    pub(super) claim_one_task_resumed: Option<String>,
}

impl ClaimColumn {
    pub(super) fn new(
        column: &'static str,
        statements: &Statements,
        resume: Option<(String, String)>,
    ) -> Self {
        let expire_candidates = if column == "task_name" {
            statements.expire_candidates.clone()
        } else {
            statements.expire_candidates.replace(
                "WHERE e.status IN",
                &format!("WHERE e.{column} IS NOT NULL AND e.status IN"),
            )
        };
        let claim_one_task = filter_tasks_on(column, &statements.claim_one_task);
        let claim_one_task_resumed = resume
            .as_ref()
            .map(|(table, index)| super::resume::resumed(&claim_one_task, table, index));
        Self {
            column,
            claim_one_task,
            expire_candidates,
            resume,
            claim_one_task_resumed,
        }
    }

    /// A claim `statement` filtering tasks on the column.
    pub(super) fn claim(&self, statement: &str) -> String {
        filter_tasks_on(self.column, statement)
    }

    /// A claim `statement` (filtering on the column) resuming after a key, when claims resume.
    pub(super) fn resumed(&self, statement: &str) -> Option<String> {
        let (table, index) = self.resume.as_ref()?;
        Some(super::resume::resumed(statement, table, index))
    }
}

/// `statement` (a claim) filtering tasks on `column`, so it walks the index that holds only
/// claimable rows instead of every finished row (MySQL/MariaDB).
pub(super) fn filter_tasks_on(column: &str, statement: &str) -> String {
    if column == "task_name" {
        statement.to_string()
    } else {
        statement.replace("AND e.task_name ", &format!("AND e.{column} "))
    }
}

/// What a claim answers of each claimed row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClaimAnswer {
    /// Every column (`claim`'s executions).
    Execution,
    /// The columns a worker runs it with, [`sql::CLAIMED_COLUMNS`] (`claim_to_run`).
    ToRun,
}

/// A claim in steps (`statement`: its select names every column, once) selecting what
/// `answer` reads of each row.
pub(super) fn claim_in_steps_for(statement: String, answer: ClaimAnswer) -> String {
    match answer {
        ClaimAnswer::Execution => statement,
        ClaimAnswer::ToRun => {
            debug_assert!(
                statement.contains(sql::EXECUTION_COLUMNS),
                "a claim in steps selects every column: {statement}"
            );
            statement.replacen(sql::EXECUTION_COLUMNS, sql::CLAIMED_COLUMNS, 1)
        }
    }
}

/// A dialect's one-statement claim template with the claim select and its time filled in, and
/// what it keeps and answers of each row; `tasks` is `= ?` or `IN (?, …)`. The rows the
/// statement updates keep what it answers, plus what its attempts insert and its order read.
pub(super) fn one_statement_claim(template: &str, tasks: &str, answer: ClaimAnswer) -> String {
    let (returned, answered) = match answer {
        ClaimAnswer::Execution => ("{cols}".to_string(), "{cols}"),
        ClaimAnswer::ToRun => (
            format!("{}, worker_id", sql::CLAIMED_COLUMNS),
            sql::CLAIMED_COLUMNS,
        ),
    };
    template
        .replace("{claim}", &sql::CLAIM.replace("{cols}", "e.id"))
        .replace("{returned}", &returned)
        .replace("{answered}", answered)
        .replace("{now}", sql::NOW_OR_TRANSACTION_TIME)
        .replace("{tasks}", tasks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `claim_to_run`'s claim in steps narrows the select by its column list, which must appear
    /// once, as the select's columns.
    #[test]
    fn the_claim_in_steps_names_every_column_once_and_narrows_to_the_claimed_ones() {
        let claim = sql::render(
            &sql::CLAIM.replace("{tasks}", "= ?"),
            "x_executions",
            "x_attempts",
            " FOR UPDATE",
            " SKIP LOCKED",
        );
        assert_eq!(claim.matches(sql::EXECUTION_COLUMNS).count(), 1);
        let narrowed = claim_in_steps_for(claim.clone(), ClaimAnswer::ToRun);
        assert!(
            narrowed.starts_with(&format!(
                "SELECT {} FROM x_executions e ",
                sql::CLAIMED_COLUMNS
            )),
            "{narrowed}"
        );
        assert_eq!(
            narrowed.replacen(sql::CLAIMED_COLUMNS, sql::EXECUTION_COLUMNS, 1),
            claim,
            "only the columns change"
        );
        assert_eq!(
            claim_in_steps_for(claim.clone(), ClaimAnswer::Execution),
            claim
        );
    }
}
