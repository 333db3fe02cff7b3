-- Table and view locations are stored in one canonical spelling (see floe_storage::Location)
-- and compared bytewise ("C" collation, as SQLite compares): the overlap check of a new or
-- moved location reads an equal location, its ancestors and the range of everything below it
-- from this index.
ALTER TABLE tabulars ALTER COLUMN location TYPE TEXT COLLATE "C";
CREATE INDEX tabulars_by_location ON tabulars (warehouse_id, location);
