-- For an outbox_event table created from an earlier sql/outbox.sql, whose
-- idx_outbox_due was (status, next_retry_at) and idx_outbox_aggregate
-- (aggregate_type, aggregate_id, status, id).  Both still work; this
-- makes a claim and a SENT write fewer index entries:
--
-- * outboxd keeps next_retry_at NULL on every row but a RETRY one and
--   reads due retries through (next_retry_at) alone;
-- * the ordering check reads the generated column `unfinished` (status
--   IN ('PENDING', 'RETRY', 'PROCESSING')) instead of status, so that
--   claiming a row does not move its entry in the aggregate index.
--
-- The first ALTER only adds metadata; the second builds two indexes
-- online on InnoDB (LOCK = NONE).  Rows finished before the upgrade may
-- still carry a next_retry_at: the UPDATE clears them in steps of 10,000
-- through the new index; repeat it until it reports 0 rows affected.

ALTER TABLE outbox_event
  ADD COLUMN unfinished TINYINT GENERATED ALWAYS AS
    (status IN ('PENDING', 'RETRY', 'PROCESSING')) VIRTUAL;

ALTER TABLE outbox_event
  DROP INDEX idx_outbox_due,
  ADD INDEX idx_outbox_due (next_retry_at),
  DROP INDEX idx_outbox_aggregate,
  ADD INDEX idx_outbox_aggregate (aggregate_type, aggregate_id, unfinished, id),
  LOCK = NONE;

UPDATE outbox_event SET next_retry_at = NULL
 WHERE next_retry_at IS NOT NULL AND status <> 'RETRY'
 LIMIT 10000;
