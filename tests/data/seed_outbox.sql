-- The seed article's outbox_event DDL, verbatim: outboxd must work on it
-- unchanged (second-precision TIMESTAMPs, its two indexes, no defaults
-- for status).
CREATE TABLE outbox_event (
    id BIGINT PRIMARY KEY AUTO_INCREMENT,
    event_id VARCHAR(64) NOT NULL,
    aggregate_type VARCHAR(64) NOT NULL,
    aggregate_id VARCHAR(128) NOT NULL,
    event_type VARCHAR(128) NOT NULL,
    payload JSON NOT NULL,
    status VARCHAR(32) NOT NULL,
    retry_count INT NOT NULL DEFAULT 0,
    next_retry_at TIMESTAMP NULL,
    locked_by VARCHAR(128) NULL,
    locked_until TIMESTAMP NULL,
    created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    sent_at TIMESTAMP NULL,
    last_error VARCHAR(1024) NULL,
    CONSTRAINT uk_outbox_event_id UNIQUE (event_id)
);
-- 輪詢投遞的核心覆蓋索引
CREATE INDEX idx_outbox_claim ON outbox_event(status, next_retry_at, created_at);
-- 聚合維度溯源與排序索引
CREATE INDEX idx_outbox_aggregate ON outbox_event(aggregate_type, aggregate_id, created_at);
