-- The securable path of a pipeline's target namespace (warehouse id, then the namespace's
-- levels, separated by 0x1F), so listings keep to the pipelines a principal may manage inside
-- the query. Filled in by the store for pipelines created before this column existed.
ALTER TABLE pipelines ADD COLUMN scope TEXT;
