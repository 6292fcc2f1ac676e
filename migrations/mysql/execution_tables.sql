-- onestep tracked execution schema, MySQL 8.0.16+ and MariaDB 10.11.
-- The statements equal the one table definition in crates/onestep-sql/src/schema/table.rs (a test
-- checks every statement below against `Dialect::ddl_template`); `schema::render_ddl` runs the
-- same statements with validated names in place of the {placeholders}.
-- Same catalog as onestep-sql 0.7.1 `onestep_sql.mysql.execution_schema` creates through SQLAlchemy:
-- JSON with the expression default (JSON_OBJECT()), DATETIME(6) everywhere, InnoDB + utf8mb4,
-- no partial indexes, and every CHECK / FK name derived from its own table (they are
-- schema-global in MySQL 8).
-- {uuid_type} is CHAR(32) (hex, no dashes) for `Dialect::MySql` and UUID for `Dialect::MariaDb`:
-- SQLAlchemy 2.1 switches `sa.Uuid` to MariaDB's native UUID type once it has connected to
-- MariaDB 10.7+, even through a mysql:// URL, so that is what the reference creates there.
-- Identifiers are backquoted; in MySQL quoting never changes what an identifier names, it only
-- admits reserved words (as SQLAlchemy's quoting does).
-- The indexes are declared inside CREATE TABLE instead of as separate CREATE INDEX statements:
-- MySQL 8 has no CREATE INDEX IF NOT EXISTS (MariaDB has), so this is the one form that is
-- idempotent on both; the resulting keys are the same ones the reference's CREATE INDEX makes.
-- Callers serialize this with GET_LOCK('lock_onestep_execution_ddl', 10), then
-- GET_LOCK(<mysql_ddl_lock_name>, 10), and RELEASE_LOCK both (pair first) afterwards.
CREATE TABLE IF NOT EXISTS `{executions}` (
	id {uuid_type} NOT NULL,
	namespace VARCHAR(255) NOT NULL,
	task_name VARCHAR(255) NOT NULL,
	status VARCHAR(32) NOT NULL,
	payload JSON NOT NULL,
	metadata JSON NOT NULL DEFAULT (JSON_OBJECT()),
	result JSON,
	error JSON,
	idempotency_key VARCHAR(255),
	submission_digest VARCHAR(64),
	attempts INTEGER NOT NULL DEFAULT '0',
	available_at DATETIME(6) NOT NULL,
	lease_token {uuid_type},
	lease_expires_at DATETIME(6),
	worker_id VARCHAR(255),
	cancel_reason VARCHAR(500),
	cancel_requested_at DATETIME(6),
	expires_at DATETIME(6),
	created_at DATETIME(6) NOT NULL,
	updated_at DATETIME(6) NOT NULL,
	started_at DATETIME(6),
	finished_at DATETIME(6),
	version BIGINT NOT NULL DEFAULT '0',
	PRIMARY KEY (id),
	CONSTRAINT `{ck_status}` CHECK (status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'cancel_requested', 'cancelled', 'expired')),
	CONSTRAINT `{ck_idempotency}` CHECK ((idempotency_key IS NULL AND submission_digest IS NULL) OR (idempotency_key IS NOT NULL AND submission_digest IS NOT NULL)),
	UNIQUE INDEX `{uq_idempotency}` (namespace, task_name, idempotency_key),
	INDEX `{ix_claim}` (namespace, task_name, available_at, created_at, id),
	INDEX `{ix_lease}` (lease_expires_at, id),
	INDEX `{ix_list}` (namespace, created_at DESC, id DESC)
)ENGINE=InnoDB CHARSET=utf8mb4
-- statement
CREATE TABLE IF NOT EXISTS `{attempts}` (
	id {uuid_type} NOT NULL,
	execution_id {uuid_type} NOT NULL,
	attempt_no INTEGER NOT NULL,
	lease_token {uuid_type} NOT NULL,
	worker_id VARCHAR(255) NOT NULL,
	status VARCHAR(32) NOT NULL,
	error JSON,
	started_at DATETIME(6) NOT NULL,
	heartbeat_at DATETIME(6) NOT NULL,
	finished_at DATETIME(6),
	PRIMARY KEY (id),
	CONSTRAINT `{uq_attempts_execution_attempt}` UNIQUE (execution_id, attempt_no),
	CONSTRAINT `{ck_attempt_status}` CHECK (status IN ('running', 'succeeded', 'retrying', 'failed', 'cancelled', 'lease_lost')),
	CONSTRAINT `{fk_attempts_execution}` FOREIGN KEY(execution_id) REFERENCES `{executions}` (id) ON DELETE CASCADE,
	INDEX `{ix_attempts_execution}` (execution_id, attempt_no DESC)
)ENGINE=InnoDB CHARSET=utf8mb4
