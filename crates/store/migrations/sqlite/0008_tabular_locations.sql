-- Table and view locations are stored in one canonical spelling (see floe_storage::Location)
-- and compared bytewise; this index serves the overlap check of a new or moved location
-- (an equal location, one of its ancestors, or anything below it).
CREATE INDEX tabulars_by_location ON tabulars (warehouse_id, location);
