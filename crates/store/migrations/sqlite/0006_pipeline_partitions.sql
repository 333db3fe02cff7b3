-- Pipelines are split by source partition: the nodes taking part in a pipeline (members)
-- and a lease per partition. The pipeline-wide owner and lease columns are no longer used.
CREATE TABLE pipeline_members (
    pipeline TEXT NOT NULL,
    node TEXT NOT NULL,
    lease_until_ms BIGINT NOT NULL,
    PRIMARY KEY (pipeline, node)
);
CREATE TABLE pipeline_partitions (
    pipeline TEXT NOT NULL,
    topic TEXT NOT NULL,
    source_partition BIGINT NOT NULL,
    owner TEXT,
    lease_until_ms BIGINT,
    PRIMARY KEY (pipeline, topic, source_partition)
);
