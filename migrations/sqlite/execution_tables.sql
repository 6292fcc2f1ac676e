-- onestep tracked execution schema, SQLite (3.8.0+ for partial indexes; tested on 3.40).
-- The statements equal the one table definition in crates/onestep-sql/src/schema/table.rs (a test
-- checks every statement below against `Dialect::ddl_template`); `schema::render_ddl` runs the
-- same statements with validated names in place of the {placeholders}.
-- The reference has no SQLite backend of its own: its unit suites run the PostgreSQL schema
-- (`onestep_sql.postgres.execution_schema`) on SQLite, and this is that schema as SQLAlchemy renders
-- it for the sqlite dialect: UUID -> CHAR(32) (hex, no dashes), JSONB -> JSON, TIMESTAMPTZ -> DATETIME,
-- the same partial indexes, the same fixed CHECK names, an unnamed FK, and PostgreSQL's naming rule
-- (63-character limit) for derived names.
-- Type affinity: JSON and DATETIME have NUMERIC affinity in SQLite; CHAR/VARCHAR have TEXT affinity.
-- The FK is only enforced on connections that run `PRAGMA foreign_keys = ON`.
CREATE TABLE IF NOT EXISTS "{executions}" (
	id CHAR(32) NOT NULL,
	namespace VARCHAR(255) NOT NULL,
	task_name VARCHAR(255) NOT NULL,
	status VARCHAR(32) NOT NULL,
	payload JSON NOT NULL,
	metadata JSON DEFAULT '{}' NOT NULL,
	result JSON,
	error JSON,
	idempotency_key VARCHAR(255),
	submission_digest VARCHAR(64),
	attempts INTEGER DEFAULT '0' NOT NULL,
	available_at DATETIME NOT NULL,
	lease_token CHAR(32),
	lease_expires_at DATETIME,
	worker_id VARCHAR(255),
	cancel_reason VARCHAR(500),
	cancel_requested_at DATETIME,
	expires_at DATETIME,
	created_at DATETIME NOT NULL,
	updated_at DATETIME NOT NULL,
	started_at DATETIME,
	finished_at DATETIME,
	version BIGINT DEFAULT '0' NOT NULL,
	PRIMARY KEY (id),
	CONSTRAINT "{ck_status}" CHECK (status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'cancel_requested', 'cancelled', 'expired')),
	CONSTRAINT "{ck_idempotency}" CHECK ((idempotency_key IS NULL AND submission_digest IS NULL) OR (idempotency_key IS NOT NULL AND submission_digest IS NOT NULL))
)
-- statement
CREATE UNIQUE INDEX IF NOT EXISTS "{uq_idempotency}" ON "{executions}" (namespace, task_name, idempotency_key) WHERE idempotency_key IS NOT NULL
-- statement
CREATE INDEX IF NOT EXISTS "{ix_claim}" ON "{executions}" (namespace, task_name, available_at, created_at, id) WHERE status IN ('queued', 'retrying')
-- statement
CREATE INDEX IF NOT EXISTS "{ix_lease}" ON "{executions}" (lease_expires_at, id) WHERE status IN ('running', 'cancel_requested')
-- statement
CREATE INDEX IF NOT EXISTS "{ix_list}" ON "{executions}" (namespace, created_at DESC, id DESC)
-- statement
CREATE TABLE IF NOT EXISTS "{attempts}" (
	id CHAR(32) NOT NULL,
	execution_id CHAR(32) NOT NULL,
	attempt_no INTEGER NOT NULL,
	lease_token CHAR(32) NOT NULL,
	worker_id VARCHAR(255) NOT NULL,
	status VARCHAR(32) NOT NULL,
	error JSON,
	started_at DATETIME NOT NULL,
	heartbeat_at DATETIME NOT NULL,
	finished_at DATETIME,
	PRIMARY KEY (id),
	CONSTRAINT "{uq_attempts_execution_attempt}" UNIQUE (execution_id, attempt_no),
	CONSTRAINT "{ck_attempt_status}" CHECK (status IN ('running', 'succeeded', 'retrying', 'failed', 'cancelled', 'lease_lost')),
	FOREIGN KEY(execution_id) REFERENCES "{executions}" (id) ON DELETE CASCADE
)
-- statement
CREATE INDEX IF NOT EXISTS "{ix_attempts_execution}" ON "{attempts}" (execution_id, attempt_no DESC)
