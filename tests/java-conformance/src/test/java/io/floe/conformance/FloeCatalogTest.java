package io.floe.conformance;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.catalog.CatalogTests;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.rest.RESTCatalog;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;

/**
 * Iceberg's {@link CatalogTests} (namespaces, tables, transactions, commits, register, ...) run
 * against a live Floe server through the Java {@link RESTCatalog}.
 *
 * <p>Each test gets a fresh client; the whole catalog is emptied before and after each test.
 */
public class FloeCatalogTest extends CatalogTests<RESTCatalog> {

  private RESTCatalog catalog;
  private final List<RESTCatalog> extraCatalogs = new ArrayList<>();
  private String testId;

  @BeforeAll
  static void checkServer() {
    FloeCatalogs.preflight();
  }

  @BeforeEach
  void setUpCatalog() {
    testId = FloeCatalogs.newTestId();
    catalog = FloeCatalogs.newCatalog(FloeCatalogs.MAIN_CATALOG_NAME, Map.of());
    if (FloeCatalogs.cleanupEnabled()) {
      FloeCatalogs.purgeAll(catalog);
    }
  }

  @AfterEach
  void tearDownCatalog() {
    try {
      if (catalog != null && FloeCatalogs.cleanupEnabled()) {
        FloeCatalogs.purgeAll(catalog);
      }
    } finally {
      extraCatalogs.forEach(FloeCatalogs::closeQuietly);
      extraCatalogs.clear();
      FloeCatalogs.closeQuietly(catalog);
      catalog = null;
    }
  }

  @Override
  protected RESTCatalog catalog() {
    return catalog;
  }

  @Override
  protected RESTCatalog initCatalog(String catalogName, Map<String, String> additionalProperties) {
    RESTCatalog extra = FloeCatalogs.newCatalog(catalogName, additionalProperties);
    extraCatalogs.add(extra);
    return extra;
  }

  /**
   * Location used by the tests that request an explicit table location (withLocation(...)).
   * Iceberg's default is file:/tmp/ns/name, outside Floe's warehouse (Floe answers 400), so with
   * FLOE_LOCATION_BASE set we point them inside the warehouse instead.
   */
  @Override
  protected String baseTableLocation(TableIdentifier identifier) {
    String base = FloeCatalogs.locationBase();
    if (base == null) {
      return super.baseTableLocation(identifier);
    }
    return base + "/" + testId + "/tables/" + identifier.namespace() + "/" + identifier.name();
  }

  // ---- capability flags (one line each; flip here as Floe's behaviour changes) ----

  // Namespaces carry properties (GET/POST .../namespaces/{ns}/properties).
  @Override
  protected boolean supportsNamespaceProperties() { return true; }

  // Multi-level namespaces (a.b.c) and listNamespaces(parent) are implemented.
  @Override
  protected boolean supportsNestedNamespaces() { return true; }

  // The REST spec needs the namespace to exist before a table goes in it (404 otherwise); this
  // also enables tableCreationWithoutNamespace, which asserts NoSuchNamespaceException.
  @Override
  protected boolean requiresNamespaceCreate() { return true; }

  // Commits carry requirements checked by the server; conflicts answer 409 with
  // "Requirement failed: ..." and the server-side-retry tests are enabled.
  @Override
  protected boolean supportsServerSideRetry() { return true; }

  // false: a requested location is honoured as-is (the tests assert table.location() equals it);
  // Floe rejects out-of-warehouse locations rather than rewriting them, see baseTableLocation.
  @Override
  protected boolean overridesRequestedLocation() { return false; }

  // Names containing '/' are percent-encoded in the path (%2F) and must round-trip.
  @Override
  protected boolean supportsNamesWithSlashes() { return true; }

  // Namespace levels are joined with 0x1F in REST, so '.' inside a name is legal.
  @Override
  protected boolean supportsNamesWithDot() { return true; }

  // Tables directly in the root (empty) namespace are not addressable through REST paths.
  @Override
  protected boolean supportsEmptyNamespace() { return false; }
}
