//! Floe's SQL engine: a DataFusion session whose catalogs are Floe warehouses.
