-- What each worker's cache of data-file blocks has answered since the worker started: blocks
-- found in memory, found on disk, and fetched from storage.
ALTER TABLE cluster_workers ADD COLUMN cache_memory_hits BIGINT NOT NULL DEFAULT 0;
ALTER TABLE cluster_workers ADD COLUMN cache_disk_hits BIGINT NOT NULL DEFAULT 0;
ALTER TABLE cluster_workers ADD COLUMN cache_misses BIGINT NOT NULL DEFAULT 0;
