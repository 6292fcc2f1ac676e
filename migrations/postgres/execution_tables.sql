-- onestep tracked execution schema, PostgreSQL (15+; any 9.5+ accepts it).
-- The statements equal the one table definition in crates/onestep-sql/src/schema/table.rs (a test
-- checks every statement below against `Dialect::ddl_template`); `schema::render_ddl` runs the
-- same statements with validated names in place of the {placeholders}.
-- Same catalog as onestep-sql 0.7.1 `onestep_sql.postgres.execution_schema` rendered by SQLAlchemy.
-- Every identifier that can come from a user is double-quoted, which is what SQLAlchemy does for
-- mixed-case and reserved names and a no-op for lower-case ones. CHECK names are fixed constants (CHECK names are per table in
-- PostgreSQL); the FK and the primary keys stay unnamed, so PostgreSQL derives
-- `<attempts>_execution_id_fkey` and `<table>_pkey` exactly as it does for the reference.
-- Callers run this under `SELECT pg_advisory_xact_lock(<postgres_advisory_lock_key>)` in one transaction.
CREATE TABLE IF NOT EXISTS "{executions}" (
	id UUID NOT NULL,
	namespace VARCHAR(255) NOT NULL,
	task_name VARCHAR(255) NOT NULL,
	status VARCHAR(32) NOT NULL,
	payload JSONB NOT NULL,
	metadata JSONB DEFAULT '{}' NOT NULL,
	result JSONB,
	error JSONB,
	idempotency_key VARCHAR(255),
	submission_digest VARCHAR(64),
	attempts INTEGER DEFAULT '0' NOT NULL,
	available_at TIMESTAMP WITH TIME ZONE NOT NULL,
	lease_token UUID,
	lease_expires_at TIMESTAMP WITH TIME ZONE,
	worker_id VARCHAR(255),
	cancel_reason VARCHAR(500),
	cancel_requested_at TIMESTAMP WITH TIME ZONE,
	expires_at TIMESTAMP WITH TIME ZONE,
	created_at TIMESTAMP WITH TIME ZONE NOT NULL,
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL,
	started_at TIMESTAMP WITH TIME ZONE,
	finished_at TIMESTAMP WITH TIME ZONE,
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
	id UUID NOT NULL,
	execution_id UUID NOT NULL,
	attempt_no INTEGER NOT NULL,
	lease_token UUID NOT NULL,
	worker_id VARCHAR(255) NOT NULL,
	status VARCHAR(32) NOT NULL,
	error JSONB,
	started_at TIMESTAMP WITH TIME ZONE NOT NULL,
	heartbeat_at TIMESTAMP WITH TIME ZONE NOT NULL,
	finished_at TIMESTAMP WITH TIME ZONE,
	PRIMARY KEY (id),
	CONSTRAINT "{uq_attempts_execution_attempt}" UNIQUE (execution_id, attempt_no),
	CONSTRAINT "{ck_attempt_status}" CHECK (status IN ('running', 'succeeded', 'retrying', 'failed', 'cancelled', 'lease_lost')),
	FOREIGN KEY(execution_id) REFERENCES "{executions}" (id) ON DELETE CASCADE
)
-- statement
CREATE INDEX IF NOT EXISTS "{ix_attempts_execution}" ON "{attempts}" (execution_id, attempt_no DESC)
