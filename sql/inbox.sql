-- inbox_event: the consumer side of the outbox pattern (the seed
-- article's Inbox table, verbatim).  outboxd delivers at least once and
-- every message carries message_id = event_id; a consumer that records
-- each event_id here, in the same transaction as its business change,
-- applies every event exactly once.  Works on MySQL 5.7+ and MariaDB.
--
-- The key is (event_id, consumer_name): one event fans out to several
-- services (inventory-service, marketing-service, ...), each of which
-- keeps its own record of it.

CREATE TABLE inbox_event (
    event_id VARCHAR(64) NOT NULL,
    consumer_name VARCHAR(128) NOT NULL,
    event_type VARCHAR(128) NOT NULL,
    status VARCHAR(32) NOT NULL,
    received_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    processed_at TIMESTAMP NULL,
    retry_count INT NOT NULL DEFAULT 0,
    error_message VARCHAR(1024) NULL,
    PRIMARY KEY (event_id, consumer_name)
);

-- Monitoring: what one consumer has stuck in a status, oldest first.
CREATE INDEX idx_inbox_monitor ON inbox_event(consumer_name, status, received_at);

-- Recipe 1 (the seed's, for MySQL and MariaDB): per message, in ONE
-- transaction with the business change, autocommit off.
--
--   START TRANSACTION;
--   INSERT IGNORE INTO inbox_event
--       (event_id, consumer_name, event_type, status, received_at)
--   VALUES (?message_id, 'inventory-service', ?type, 'PROCESSING',
--           CURRENT_TIMESTAMP);
--
--   affected rows = 1: first delivery.  Apply the business change, then
--       UPDATE inbox_event SET status = 'PROCESSED',
--              processed_at = CURRENT_TIMESTAMP
--        WHERE event_id = ?message_id
--          AND consumer_name = 'inventory-service';
--       COMMIT;  then ack the message.
--   affected rows = 0: a duplicate delivery (already processed, or being
--       processed by another instance, which holds the row lock until
--       it commits).  COMMIT (nothing changed), ack, skip.
--   any error: ROLLBACK (the inbox row goes with the business change)
--       and reject with requeue: the redelivery starts over.
--
-- Ack only after COMMIT: a crash in between leaves a committed inbox
-- row, and the redelivery is then skipped as the duplicate it is.
-- INSERT IGNORE also turns other errors (a too-long event_type, a NULL)
-- into warnings; recipe 2 does not.

-- Recipe 2: INSERT ... ON DUPLICATE KEY UPDATE, strict about every
-- other error.  Counting redeliveries in retry_count makes the result
-- unambiguous whatever the client's CLIENT_FOUND_ROWS setting (JDBC
-- sets it by default): affected rows = 1 is a first delivery, 2 a
-- duplicate.
--
--   INSERT INTO inbox_event
--       (event_id, consumer_name, event_type, status, received_at)
--   VALUES (?message_id, 'inventory-service', ?type, 'PROCESSING',
--           CURRENT_TIMESTAMP)
--   ON DUPLICATE KEY UPDATE retry_count = retry_count + 1;

-- Retention (the seed's rule): never delete an inbox row early, or a
-- late redelivery or a replayed DEAD event looks new again.  Keep rows
-- at least the broker's message TTL + the longest retry wait + the time
-- an operator may take to replay (outboxctl dead retry): 7 to 14 days
-- or more.  Delete in small batches, as outboxd does with SENT rows;
-- this condition is a range of idx_inbox_monitor, so LIMIT bounds what
-- each statement reads and locks:
--
--   DELETE FROM inbox_event
--    WHERE consumer_name = 'inventory-service' AND status = 'PROCESSED'
--      AND received_at < NOW() - INTERVAL 14 DAY
--    LIMIT 5000;
