-- For an outbox_event table created from an earlier sql/outbox.sql, or
-- the seed's: InnoDB statistics sampled in memory (transient) instead of
-- kept in mysql.innodb_table_stats and mysql.innodb_index_stats.
--
-- An outbox turns its rows over all day: each event is inserted, then
-- written SENT (or deleted).  With persistent statistics, InnoDB
-- recalculates a table's whenever a tenth of its rows changed, at most
-- every 10 s per table, writing a row per index column in a transaction
-- of its own; for a small table that is nearly every second change.  On
-- a server of a thousand tenants' outboxes it cost more than the events
-- themselves (docs/operations.md, The server of many tenants).  The
-- claims name their index wherever a plan could stray, and outboxd's
-- tests check their plans on a table with statistics kept so.
--
-- A change of table options only: metadata, no copy of the table.

ALTER TABLE outbox_event STATS_PERSISTENT = 0;
