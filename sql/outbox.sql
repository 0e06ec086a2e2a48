-- outbox_event: the recommended outbox table for outboxd (MySQL 8.0.1+,
-- MariaDB 10.6+).  The application inserts rows with status 'PENDING' in
-- the same transaction as its business rows; outboxd does the rest.
-- Transactions that may write events of one aggregate at the same time
-- lock the aggregate's own row first (SELECT ... FOR UPDATE), so that its
-- ids follow commit order (docs/design.md, Ordering and concurrent
-- producers).

CREATE TABLE IF NOT EXISTS outbox_event (
  id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  event_id       VARCHAR(64)  NOT NULL,          -- message_id; consumers dedupe on it
  aggregate_type VARCHAR(64)  NOT NULL,
  aggregate_id   VARCHAR(128) NOT NULL,
  event_type     VARCHAR(128) NOT NULL,
  payload        JSON         NOT NULL,          -- message body, bytes unchanged
  headers        JSON         NULL,              -- optional: object copied into AMQP headers
  trace_id       VARCHAR(64)  NULL,              -- optional: shown in logs
  traceparent    VARCHAR(55)  NULL,              -- optional: W3C trace context header
  expires_at     TIMESTAMP(6) NULL,              -- optional: claimed at or after it -> DEAD, unpublished
  available_at   TIMESTAMP(6) NULL,              -- optional: not published before (database clock)
  status         VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
  retry_count    INT UNSIGNED NOT NULL DEFAULT 0,
  next_retry_at  TIMESTAMP(6) NULL,
  locked_by      VARCHAR(128) NULL,              -- claim token of the relay holding the lease
  locked_until   TIMESTAMP(6) NULL,
  created_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  sent_at        TIMESTAMP(6) NULL,
  last_error     VARCHAR(1024) NULL,
  -- Generated, never written: 1 while the event is not yet SENT or DEAD.
  -- The ordering index holds it instead of status, so that claiming a
  -- row (PENDING to PROCESSING) does not move its entry there.
  unfinished     TINYINT GENERATED ALWAYS AS
                   (status IN ('PENDING', 'RETRY', 'PROCESSING')) VIRTUAL,
  -- Generated, never written: 1 for a DEAD event not released.  With
  -- on_dead: hold it holds the later events of its aggregate until
  -- `outboxctl dead retry` or `dead release` (sets locked_by).
  held           TINYINT GENERATED ALWAYS AS
                   (status = 'DEAD' AND locked_by IS NULL) VIRTUAL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_outbox_event_id (event_id),
  -- Claim of PENDING rows: the undelayed ones (available_at NULL) in id
  -- order, the delayed ones that are due in available_at order, never
  -- reading those not yet due; status counts for outboxctl.
  KEY idx_outbox_status (status, available_at, id),
  -- Claim of RETRY rows whose backoff is over.  next_retry_at is NULL
  -- but on RETRY rows, so a row's claim and SENT never write this index.
  KEY idx_outbox_due (next_retry_at),
  -- Ordering: unfinished earlier events of one aggregate.
  KEY idx_outbox_aggregate (aggregate_type, aggregate_id, unfinished, id),
  -- on_dead: hold: the held DEAD event of an aggregate, one entry away
  -- rather than past its SENT history; held aggregates for the gauge.
  KEY idx_outbox_held (held, aggregate_type, aggregate_id, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  -- Statistics sampled in memory, not kept in mysql.innodb_*_stats: a
  -- small outbox turns over most of its rows each second, and InnoDB
  -- recalculates a persistent table's statistics, writing a row per
  -- index column in a transaction of their own, whenever a tenth has
  -- changed (at most every 10 s per table): each event of a thousand
  -- tenants' tables cost the server more that way than everything else
  -- (docs/operations.md, The server of many tenants).
  STATS_PERSISTENT = 0;
