-- Adds the optional expires_at column to an outbox_event table created
-- from an earlier sql/outbox.sql.  A row whose expires_at has passed when
-- outboxd claims it (by the database clock) goes to DEAD with last_error
-- saying when it expired, and is never published; NULL never expires
-- (docs/contract.md section 6).  outboxd sees the column at its next
-- schema check (within a minute) without a restart.
--
-- A nullable column at the end of the table: an instant change, metadata
-- only, on MariaDB 10.3+ and MySQL 8.0.12+ (older MySQL 8.0 copies the
-- table).  The claim reads it on rows it has already found, so it needs
-- no index.

ALTER TABLE outbox_event
  ADD COLUMN expires_at TIMESTAMP(6) NULL;
