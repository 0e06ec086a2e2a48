-- For an outbox_event table created from an earlier sql/outbox.sql: the
-- optional available_at column (a row is not published before it, by the
-- database's clock), and idx_outbox_status extended from (status, id) to
-- (status, available_at, id) so that no claim reads a delayed row not
-- yet due.  outboxd finds both at its next schema check (within a minute,
-- or at restart): let producers write available_at only after that, as a
-- relay that has not seen the column yet publishes at once.  Existing
-- rows get NULL: not delayed.
--
-- The column: MariaDB cannot add it instantly nor rebuild online a table
-- with an indexed virtual column (`unfinished`), so the first ALTER
-- rebuilds the table with LOCK = SHARED: reads go on, producers' INSERTs
-- and the relay's claims wait until it ends (run it at a quiet time, or
-- with an online schema change tool).  MySQL 8.0.12+ adds it instantly:
-- there, replace the first ALTER's last line by ALGORITHM = INSTANT.
-- The index is then rebuilt online (LOCK = NONE); the old one serves
-- until the ALTER ends.

ALTER TABLE outbox_event
  ADD COLUMN available_at TIMESTAMP(6) NULL,
  ALGORITHM = INPLACE, LOCK = SHARED;

ALTER TABLE outbox_event
  DROP INDEX idx_outbox_status,
  ADD INDEX idx_outbox_status (status, available_at, id),
  ALGORITHM = INPLACE, LOCK = NONE;
