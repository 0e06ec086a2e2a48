-- For an outbox_event table created from an earlier sql/outbox.sql, to
-- run with on_dead: hold.  Without it hold still works, but each claim
-- then reads the DEAD rows of a candidate's aggregate along its history;
-- with it, one entry of idx_outbox_held.  outboxd uses the column once
-- its schema check sees it (within a minute, or at a restart).
--
-- `held` is 1 for a DEAD row that `outboxctl dead release` has not
-- released (locked_by stays NULL on DEAD rows until then).  The column
-- only adds metadata; the index is built online on InnoDB.

ALTER TABLE outbox_event
  ADD COLUMN held TINYINT GENERATED ALWAYS AS
    (status = 'DEAD' AND locked_by IS NULL) VIRTUAL;

ALTER TABLE outbox_event
  ADD INDEX idx_outbox_held (held, aggregate_type, aggregate_id, id),
  LOCK = NONE;
